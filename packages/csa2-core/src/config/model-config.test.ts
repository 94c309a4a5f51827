import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, UnsupportedFeatureError } from '../errors.js';
import { assertRunnable, parseModelConfig, readModelConfigFile, unsupportedSettings } from './model-config.js';
import { fixturesRoot } from '../testing/fixtures.js';

const FIXTURES = fixturesRoot();
const TINY_A = `${FIXTURES}/deepseek-v41-tiny-a/config.json`;
const RELEASED = `${FIXTURES}/deepseek-v41-flash/config.json`;

async function readJson(path: string): Promise<Record<string, unknown>> {
  return JSON.parse(await readFile(path, 'utf8')) as Record<string, unknown>;
}

test('the released V4.1-Flash config parses with the documented values and defaults', async () => {
  const c = await readModelConfigFile(RELEASED);
  assert.equal(c.vocabSize, 129280);
  assert.equal(c.dim, 5120);
  assert.equal(c.numLayers, 40);
  assert.equal(c.numHeads, 64);
  assert.equal(c.headDim, 512);
  assert.equal(c.ropeHeadDim, 64);
  assert.equal(c.qLoraRank, 1280);
  assert.equal(c.oGroups, 8);
  assert.equal(c.oLoraRank, 1024);
  assert.equal(c.normEps, 1e-20);
  assert.equal(c.windowSize, 128);
  assert.equal(c.compressRatios.length, 40, 'only the backbone entries of the 43-entry list');
  assert.deepEqual(c.compressRatios.slice(0, 3), [0, 0, 2]);
  assert.equal(c.compressRatios[19], 2);
  assert.equal(c.compressRatios[20], 1);
  assert.equal(c.compressRatios[39], 1);
  assert.deepEqual(c.kvSourceLayers, [2, 8, 14, 20]);
  assert.deepEqual(c.indexSourceLayers, [2, 8, 14, 20, 24, 28, 32, 36]);
  assert.equal(c.compressRopeTheta, 160000);
  assert.equal(c.ropeTheta, 10000);
  assert.equal(c.originalSeqLen, 65536);
  assert.equal(c.ropeFactor, 16);
  assert.equal(c.betaFast, 32);
  assert.equal(c.betaSlow, 1);
  assert.equal(c.indexNumHeads, 32);
  assert.equal(c.indexHeadDim, 128);
  assert.equal(c.indexTopK, 512);
  assert.equal(c.candidateSourceLayer, 20);
  assert.equal(c.candidateTopKBlocks, 2048);
  assert.equal(c.candidateBlockSize, 8);
  assert.equal(c.hcMult, 4);
  assert.equal(c.hcSinkhornIters, 20);
  assert.equal(c.hcEps, 1e-6);
  assert.equal(c.moeInterDim, 2304);
  assert.equal(c.numRoutedExperts, 384);
  assert.equal(c.numSharedExperts, 1);
  assert.equal(c.numActivatedExperts, 6);
  assert.equal(c.scoreFunc, 'sqrtsoftplus');
  assert.equal(c.routeScale, 1.5);
  assert.equal(c.swigluLimit, 10);
  // keys absent from the released config take the ModelArgs defaults
  assert.equal(c.gateTemp, 1);
  assert.equal(c.normTopKProb, true);
  assert.equal(c.maxSeqLen, 4096);
  assert.equal(c.maxBatchSize, 4);
  assert.equal(c.temperature, 1);
  assert.equal(c.weightDtype, 'fp8');
  assert.equal(c.expertDtype, 'fp4');
  assert.deepEqual(c.engramLayerIds, [1, 14]);
  assert.equal(c.visionNumLayers, 32);
  assert.equal(c.numMtpLayers, 3);
  assert.equal(c.dsparkBlockSize, 5);
  assert.ok(Object.isFrozen(c) && Object.isFrozen(c.compressRatios));
});

test('the tiny-a fixture config parses', async () => {
  const c = await readModelConfigFile(TINY_A);
  assert.equal(c.dim, 64);
  assert.equal(c.numLayers, 6);
  assert.equal(c.numHeads, 2);
  assert.deepEqual(c.compressRatios, [0, 2, 2, 1, 1, 1]);
  assert.deepEqual(c.kvSourceLayers, [1, 3]);
  assert.deepEqual(c.indexSourceLayers, [1, 3, 5]);
  assert.equal(c.candidateSourceLayer, 3);
  assert.equal(c.maxSeqLen, 256);
  assert.equal(c.maxBatchSize, 1);
  assert.equal(c.temperature, 0);
  assert.equal(c.weightDtype, 'bf16');
  assert.equal(c.expertDtype, null);
  assert.equal(c.numMtpLayers, 0);
  assert.equal(c.originalSeqLen, 16);
  assert.equal(c.ropeFactor, 4);
  assert.doesNotThrow(() => assertRunnable(c));
  assert.deepEqual(unsupportedSettings(c), []);
});

test('an empty object takes every ModelArgs default', () => {
  const c = parseModelConfig({});
  assert.equal(c.dim, 1024);
  assert.equal(c.numLayers, 5);
  assert.deepEqual(c.compressRatios, [0, 2, 2, 1, 1]);
  assert.deepEqual(c.kvSourceLayers, [1, 3]);
  assert.deepEqual(c.indexSourceLayers, [1, 3]);
  assert.equal(c.candidateSourceLayer, -1);
  assert.equal(c.compressRopeTheta, 40000);
  assert.equal(c.ropeFactor, 40);
  assert.equal(c.indexTopK, 64);
  assert.equal(c.maxSeqLen, 4096);
  assert.equal(c.numMtpLayers, 1);
  assert.equal(c.dsparkBlockSize, 0);
  assert.equal(c.weightDtype, 'fp8');
  assert.equal(c.expertDtype, 'fp4');
});

test('each alias spelling is accepted', async () => {
  const base = await readJson(TINY_A);
  const renames: Array<[string, string, unknown]> = [
    ['kv_source_layers', 'kv_source_layer_ids', [1, 3]],
    ['index_source_layers', 'index_source_layer_ids', [1, 3, 5]],
    ['candidate_source_layer', 'candidate_source_layer_id', 3],
    ['n_layers', 'num_hidden_layers', 6],
    ['dim', 'hidden_size', 64],
    ['n_heads', 'num_attention_heads', 2],
    ['window_size', 'sliding_window', 8],
    ['norm_eps', 'rms_norm_eps', 1e-20],
  ];
  const reference = parseModelConfig(base);
  for (const [official, alias, value] of renames) {
    const json: Record<string, unknown> = { ...base, [alias]: value };
    delete json[official];
    assert.deepEqual(parseModelConfig(json), reference, `${alias} should stand in for ${official}`);
    // both spellings present and equal: fine
    assert.deepEqual(parseModelConfig({ ...base, [alias]: value }), reference);
  }
  // both spellings present but different: a ConfigError naming the alias
  assert.throws(
    () => parseModelConfig({ ...base, num_hidden_layers: 7 }),
    (e: unknown) => e instanceof ConfigError && e.field === 'num_hidden_layers' && /conflicts with n_layers/.test(e.message),
  );
  // an alias names itself in errors
  assert.throws(
    () => parseModelConfig({ ...base, n_heads: undefined, num_attention_heads: 'x' }),
    (e: unknown) => e instanceof ConfigError && e.field === 'num_attention_heads',
  );
});

test('bad inputs give a ConfigError naming the JSON key and the bad value', async () => {
  const base = await readJson(TINY_A);
  const cases: Array<[Record<string, unknown>, string, RegExp]> = [
    [{ n_heads: 'x' }, 'n_heads', /must be a positive integer, got "x"/],
    [{ dim: -64 }, 'dim', /positive integer, got -64/],
    [{ n_layers: 2.5 }, 'n_layers', /got 2\.5/],
    [{ head_dim: 48 }, 'head_dim', /multiple of 32 .*got 48/],
    [{ index_head_dim: 40 }, 'index_head_dim', /multiple of 32 .*got 40/],
    [{ rope_head_dim: 15 }, 'rope_head_dim', /even/],
    [{ rope_head_dim: 48 }, 'rope_head_dim', /<= index_head_dim \(32\), got 48/],
    [{ o_groups: 3 }, 'o_groups', /must divide n_heads \* head_dim = 128, got 3/],
    [{ n_activated_experts: 5 }, 'n_activated_experts', /<= n_routed_experts \(4\), got 5/],
    [{ n_shared_experts: 2 }, 'n_shared_experts', /must be 1/],
    [{ compress_ratios: [0, 2, 2, 1, 1] }, 'compress_ratios', /at least 6 entries/],
    [{ compress_ratios: [0, 2, -2, 1, 1, 1] }, 'compress_ratios', /entry 2 must be a non-negative integer, got -2/],
    [{ compress_ratios: 'abc' }, 'compress_ratios', /list of integers/],
    [{ kv_source_layers: [1, 6] }, 'kv_source_layers', /layer 6 is out of range \[0, 6\)/],
    [{ index_source_layers: [1, 3, 3] }, 'index_source_layers', /listed twice/],
    [{ candidate_source_layer: 9 }, 'candidate_source_layer', /out of range/],
    [{ candidate_block_size: 0 }, 'candidate_block_size', /positive integer, got 0/],
    [{ score_func: 'relu' }, 'score_func', /one of "softmax", "sigmoid", "sqrtsoftplus", got "relu"/],
    [{ dtype: 'fp16' }, 'dtype', /got "fp16"/],
    [{ expert_dtype: 'fp8' }, 'expert_dtype', /got "fp8"/],
    [{ norm_eps: 0 }, 'norm_eps', /positive finite number, got 0/],
    [{ norm_topk_prob: 1 }, 'norm_topk_prob', /true or false/],
    [{ swiglu_limit: -1 }, 'swiglu_limit', /non-negative/],
    [{ engram_layer_ids: [99] }, 'engram_layer_ids', /out of range/],
    [{ dtype: 'fp8', dim: 48, head_dim: 64 }, 'dim', /multiple of 32 when weights are fp8/],
  ];
  for (const [patch, field, message] of cases) {
    assert.throws(
      () => parseModelConfig({ ...base, ...patch }),
      (e: unknown) => {
        assert.ok(e instanceof ConfigError, `${JSON.stringify(patch)}: expected a ConfigError, got ${String(e)}`);
        assert.equal(e.field, field, JSON.stringify(patch));
        assert.match(e.message, message);
        assert.ok(e.message.startsWith(`config: ${field}: `));
        return true;
      },
    );
  }
  for (const notObject of [null, [], 'x', 3]) {
    assert.throws(
      () => parseModelConfig(notObject),
      (e: unknown) => e instanceof ConfigError && e.field === '(root)',
    );
  }
});

test('a negative candidate_source_layer means off and needs no block settings', async () => {
  const base = await readJson(TINY_A);
  const c = parseModelConfig({ ...base, candidate_source_layer: -5, candidate_topk_blocks: 0, candidate_block_size: 0 });
  assert.equal(c.candidateSourceLayer, -1);
});

test('compress_ratios must cover the MTP layers when DSpark is built', async () => {
  const base = await readJson(TINY_A);
  assert.throws(
    () => parseModelConfig({ ...base, dspark_block_size: 5, n_mtp_layers: 2 }),
    (e: unknown) => e instanceof ConfigError && e.field === 'compress_ratios' && /n_layers \+ n_mtp_layers/.test(e.message),
  );
  const c = parseModelConfig({ ...base, dspark_block_size: 5, n_mtp_layers: 2, compress_ratios: [0, 2, 2, 1, 1, 1, 0, 0] });
  assert.equal(c.compressRatios.length, 6);
});

test('assertRunnable refuses the released config, naming every offending field', async () => {
  const c = await readModelConfigFile(RELEASED);
  assert.deepEqual(
    unsupportedSettings(c).map((s) => s.field),
    ['engram_layer_ids', 'vision_n_layers', 'dspark_block_size', 'dtype', 'expert_dtype'],
  );
  assert.throws(
    () => assertRunnable(c),
    (e: unknown) => {
      assert.ok(e instanceof UnsupportedFeatureError);
      assert.equal(e.code, 'unsupported-feature');
      assert.equal(e.feature, 'engram_layer_ids');
      for (const f of ['engram_layer_ids', 'vision_n_layers', 'dspark_block_size', 'n_mtp_layers', 'dtype', 'expert_dtype']) {
        assert.match(e.message, new RegExp(f));
      }
      assert.match(e.message, /only bf16\/fp32 weights are runnable/);
      return true;
    },
  );
});

test('assertRunnable names each single out-of-scope feature', async () => {
  const base = await readJson(TINY_A);
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ engram_layer_ids: [1] }, 'engram_layer_ids'],
    [{ vision_n_layers: 2 }, 'vision_n_layers'],
    [{ dspark_block_size: 5, n_mtp_layers: 1, compress_ratios: [0, 2, 2, 1, 1, 1, 0] }, 'dspark_block_size'],
    [{ dtype: 'fp8' }, 'dtype'],
    [{ expert_dtype: 'fp4' }, 'expert_dtype'],
  ];
  for (const [patch, field] of cases) {
    const c = parseModelConfig({ ...base, ...patch });
    assert.throws(
      () => assertRunnable(c),
      (e: unknown) => e instanceof UnsupportedFeatureError && e.feature === field,
    );
  }
  // a DSpark block size without MTP layers builds nothing
  assert.doesNotThrow(() => assertRunnable(parseModelConfig({ ...base, dspark_block_size: 5, n_mtp_layers: 0 })));
});

test('readModelConfigFile names the file on bad JSON, a missing file or a bad field', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'csa2-config-'));
  try {
    const bad = join(dir, 'bad.json');
    await writeFile(bad, '{"dim": 64,');
    await assert.rejects(readModelConfigFile(bad), (e: unknown) => e instanceof ConfigError && e.field === bad && /invalid JSON/.test(e.message));
    const missing = join(dir, 'missing.json');
    await assert.rejects(readModelConfigFile(missing), (e: unknown) => e instanceof ConfigError && e.field === missing);
    const field = join(dir, 'field.json');
    await writeFile(field, JSON.stringify({ n_heads: 'x' }));
    await assert.rejects(
      readModelConfigFile(field),
      (e: unknown) => e instanceof ConfigError && e.field === 'n_heads' && e.message === `config: n_heads: must be a positive integer, got "x" (in ${field})`,
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
