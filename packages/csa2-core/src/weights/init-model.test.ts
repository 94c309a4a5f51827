import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, InputError } from '../errors.js';
import { buildLayerPlan } from '../config/layer-plan.js';
import { readModelConfigFile } from '../config/model-config.js';
import { loadCheckpoint } from './checkpoint.js';
import { SeededRandom, initModel, initRecipe, parameterCount } from './init-model.js';
import { numelOf, openSafetensors } from './safetensors.js';
import { fixturesRoot } from '../testing/fixtures.js';

const TINY_A = join(fixturesRoot(), 'deepseek-v41-tiny-a');
const RELEASED = join(fixturesRoot(), 'deepseek-v41-flash/config.json');

async function readJson(path: string): Promise<Record<string, unknown>> {
  return JSON.parse(await readFile(path, 'utf8')) as Record<string, unknown>;
}

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'csa2-init-'));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function moments(values: Float32Array): { mean: number; std: number } {
  let s = 0;
  let s2 = 0;
  for (const v of values) {
    s += v;
    s2 += v * v;
  }
  const mean = s / values.length;
  return { mean, std: Math.sqrt(s2 / values.length - mean * mean) };
}

test('SeededRandom: deterministic per seed, standard-normal moments', () => {
  const a = new SeededRandom(42);
  const b = new SeededRandom(42);
  const c = new SeededRandom(43);
  const xs = new Float32Array(200_000);
  let differs = false;
  for (let i = 0; i < xs.length; i++) {
    const v = a.nextNormal();
    assert.equal(v, b.nextNormal());
    if (v !== c.nextNormal()) differs = true;
    xs[i] = v;
  }
  assert.ok(differs);
  const m = moments(xs);
  assert.ok(Math.abs(m.mean) < 0.01, `mean ${m.mean}`);
  assert.ok(Math.abs(m.std - 1) < 0.01, `std ${m.std}`);
  const u = new SeededRandom(7);
  for (let i = 0; i < 1000; i++) {
    const v = u.nextUniform();
    assert.ok(v >= 0 && v < 1);
  }
  // large seeds use their high bits too
  assert.notEqual(new SeededRandom(2 ** 40).nextU32(), new SeededRandom(2 ** 40 + 2 ** 33).nextU32());
  assert.throws(() => new SeededRandom(1.5), InputError);
});

test('initRecipe follows the fixture README', () => {
  assert.deepEqual(initRecipe('embed.weight', [256, 64]), { offset: 0, scale: 1 });
  assert.deepEqual(initRecipe('layers.0.attn.q_norm.weight', [32]), { offset: 1, scale: 0.1 });
  assert.deepEqual(initRecipe('norm.weight', [64]), { offset: 1, scale: 0.1 });
  assert.deepEqual(initRecipe('layers.1.attn.compressor.norm.weight', [64]), { offset: 1, scale: 0.1 });
  assert.deepEqual(initRecipe('layers.0.hc_ffn_base', [24]), { offset: 0, scale: 0.5 });
  assert.deepEqual(initRecipe('layers.0.hc_attn_scale', [3]), { offset: 0.5, scale: 0.1 });
  assert.deepEqual(initRecipe('layers.0.attn.attn_sink', [2]), { offset: 0, scale: 0.5 });
  assert.deepEqual(initRecipe('layers.0.ffn.gate.bias', [4]), { offset: 0, scale: 0.1 });
  assert.deepEqual(initRecipe('layers.0.hc_attn_fn', [24, 256]), { offset: 0, scale: 1 / 16 });
  assert.deepEqual(initRecipe('layers.0.attn.wo_b.weight', [64, 64]), { offset: 0, scale: 0.25 / 8 });
  assert.deepEqual(initRecipe('layers.0.ffn.experts.3.w2.weight', [64, 16]), { offset: 0, scale: 0.2 / 4 });
  assert.deepEqual(initRecipe('layers.0.ffn.shared_experts.w2.weight', [64, 16]), { offset: 0, scale: 0.2 / 4 });
  assert.deepEqual(initRecipe('layers.0.ffn.experts.3.w1.weight', [16, 64]), { offset: 0, scale: 1 / 8 });
});

test('tiny-a config: loadable, same seed byte-identical, different seed differs', async () => {
  const json = await readJson(`${TINY_A}/config.json`);
  await withTempDir(async (dir) => {
    const a = join(dir, 'a');
    const b = join(dir, 'b');
    const c = join(dir, 'c');
    const infoA = await initModel(json, { seed: 1234, outDir: a });
    const infoB = await initModel(json, { seed: 1234, outDir: b });
    await initModel(json, { seed: 1235, outDir: c });
    assert.deepEqual(infoA.overrides, [], 'tiny-a is already runnable');
    const weights = async (d: string): Promise<Buffer> => readFile(join(d, 'model.safetensors'));
    assert.ok((await weights(a)).equals(await weights(b)), 'same seed: byte-identical weights');
    assert.ok((await readFile(join(a, 'config.json'))).equals(await readFile(join(b, 'config.json'))));
    assert.ok(!(await weights(a)).equals(await weights(c)), 'different seed: different weights');
    assert.equal(infoA.bytes, (await weights(a)).length);
    assert.deepEqual(infoB, { ...infoA, configPath: join(b, 'config.json'), weightsPath: join(b, 'model.safetensors') });

    // same tensor directory (names, shapes, dtypes) as the reference fixture; same parameter count
    const ours = openSafetensors(join(a, 'model.safetensors'));
    const ref = openSafetensors(`${TINY_A}/model.safetensors`);
    try {
      assert.equal(ours.tensors.size, ref.tensors.size);
      let refCount = 0;
      for (const t of ref.tensors.values()) {
        const o = ours.info(t.name);
        assert.deepEqual(o.shape, t.shape, t.name);
        assert.equal(o.dtype, t.dtype, t.name);
        refCount += numelOf(t.shape);
      }
      assert.equal(infoA.parameterCount, refCount);
      assert.equal(infoA.tensorCount, ref.tensors.size);
    } finally {
      ours.close();
      ref.close();
    }
    const config = await readModelConfigFile(`${TINY_A}/config.json`);
    assert.equal(parameterCount(config, buildLayerPlan(config)), infoA.parameterCount);

    const ckpt = await loadCheckpoint(a);
    try {
      assert.deepEqual(ckpt.unexpected, []);
      const embed = moments(ckpt.tensor('embed.weight').data);
      assert.ok(Math.abs(embed.mean) < 0.05 && Math.abs(embed.std - 1) < 0.05, JSON.stringify(embed));
      const norms = ckpt.tensor('layers.2.ffn_norm.weight').data;
      assert.ok(norms.every((v) => v > 0.5 && v < 1.5));
      const w1 = moments(ckpt.tensor('layers.2.ffn.experts.1.w1.weight').data); // fan_in 64: std 1/8
      assert.ok(Math.abs(w1.std - 1 / 8) < 0.01, JSON.stringify(w1));
      const w2 = moments(ckpt.tensor('layers.2.ffn.experts.1.w2.weight').data); // fan_in 32, x0.2
      assert.ok(Math.abs(w2.std - 0.2 / Math.sqrt(32)) < 0.005, JSON.stringify(w2));
      const wob = moments(ckpt.tensor('layers.4.attn.wo_b.weight').data); // fan_in 32, x0.25
      assert.ok(Math.abs(wob.std - 0.25 / Math.sqrt(32)) < 0.005, JSON.stringify(wob));
      const scale = ckpt.tensor('layers.0.hc_attn_scale').data;
      assert.ok(scale.every((v) => v > 0.1 && v < 0.9));
      // the F32-stored hc weights carry more than bf16 precision; BF16-stored ones do not
      const fn = ckpt.tensor('layers.0.hc_attn_fn').data;
      assert.ok(new Uint32Array(fn.buffer, fn.byteOffset, fn.length).some((bits) => (bits & 0xffff) !== 0));
      const wq = ckpt.tensor('layers.0.attn.wq_a.weight').data;
      assert.ok(new Uint32Array(wq.buffer, wq.byteOffset, wq.length).every((bits) => (bits & 0xffff) === 0));
    } finally {
      ckpt.close();
    }
  });
});

test('the released schedule, shrunk: out-of-scope settings are forced off and recorded', async () => {
  const released = await readJson(RELEASED);
  const shrunk = {
    ...released,
    vocab_size: 256,
    dim: 64,
    moe_inter_dim: 32,
    n_heads: 2,
    n_routed_experts: 4,
    n_activated_experts: 2,
    q_lora_rank: 32,
    head_dim: 64,
    rope_head_dim: 16,
    o_groups: 2,
    o_lora_rank: 16,
    window_size: 8,
    index_n_heads: 2,
    index_head_dim: 32,
    index_topk: 4,
    candidate_topk_blocks: 2,
    candidate_block_size: 4,
  };
  await withTempDir(async (dir) => {
    const info = await initModel(shrunk, { seed: 7, outDir: dir });
    assert.deepEqual(
      info.overrides.map((o) => [o.field, o.from, o.to]),
      [
        ['dtype', 'fp8', 'bf16'],
        ['expert_dtype', 'fp4', null],
        ['engram_layer_ids', [1, 14], []],
        ['vision_n_layers', 32, 0],
        ['dspark_block_size', 5, 0],
        ['n_mtp_layers', 3, 0],
      ],
    );
    const written = await readJson(join(dir, 'config.json'));
    assert.equal(written['dtype'], 'bf16');
    assert.equal(written['expert_dtype'], null);
    assert.deepEqual(written['engram_layer_ids'], []);
    assert.equal(written['n_mtp_layers'], 0);
    assert.deepEqual(written['kv_source_layers'], [2, 8, 14, 20]);
    const ckpt = await loadCheckpoint(dir);
    try {
      assert.equal(ckpt.plan.decoderStart, 20);
      assert.ok(ckpt.has('layers.20.attn.compressor.wkv.weight') && !ckpt.has('layers.20.attn.compressor.wgate.weight'));
      assert.equal(ckpt.tensor('layers.39.ffn.gate.bias').data.length, 4);
      assert.equal(parameterCount(ckpt.config, ckpt.plan), info.parameterCount);
    } finally {
      ckpt.close();
    }
  });
});

test('initModel refuses invalid configs and seeds before writing anything', async () => {
  const json = await readJson(`${TINY_A}/config.json`);
  await withTempDir(async (dir) => {
    await assert.rejects(
      initModel({ ...json, n_heads: 0 }, { seed: 1, outDir: join(dir, 'x') }),
      (e: unknown) => e instanceof ConfigError && e.field === 'n_heads',
    );
    await assert.rejects(initModel([1], { seed: 1, outDir: join(dir, 'y') }), ConfigError);
    await assert.rejects(initModel(json, { seed: Number.NaN, outDir: join(dir, 'z') }), InputError);
    await assert.rejects(readFile(join(dir, 'x', 'config.json')), /ENOENT/);
  });
});
