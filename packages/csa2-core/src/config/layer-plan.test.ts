import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { ConfigError } from '../errors.js';
import { buildLayerPlan } from './layer-plan.js';
import type { LayerPlan } from './layer-plan.js';
import { parseModelConfig, readModelConfigFile } from './model-config.js';
import { fixturesRoot } from '../testing/fixtures.js';

const FIXTURES = fixturesRoot();
const TINY_A = `${FIXTURES}/deepseek-v41-tiny-a/config.json`;
const RELEASED = `${FIXTURES}/deepseek-v41-flash/config.json`;

function entry(plan: LayerPlan, layer: number) {
  const e = plan.entries[layer];
  assert.ok(e !== undefined, `no entry for layer ${layer}`);
  return e;
}

test('the released schedule: 2 swa, 4 full, 4 reindex, 30 reuse; decoder starts at 20', async () => {
  const config = await readModelConfigFile(RELEASED);
  const plan = buildLayerPlan(config);
  assert.equal(plan.entries.length, 40);
  assert.deepEqual(plan.counts, { swa: 2, full: 4, reindex: 4, reuse: 30 });
  assert.equal(plan.decoderStart, 20);
  assert.equal(plan.candidateSourceLayer, 20);
  for (const l of [0, 1]) {
    const e = entry(plan, l);
    assert.equal(e.mode, 'swa');
    assert.equal(e.kvSource, null);
    assert.equal(e.indexSource, null);
    assert.equal(e.ropeTheta, 10000);
    assert.equal(e.yarn, false);
  }
  for (const l of [2, 8, 14, 20]) {
    const e = entry(plan, l);
    assert.equal(e.mode, 'full', `layer ${l}`);
    assert.ok(e.isKvSource && e.isIndexSource && e.ownsIndexK);
    assert.equal(e.kvSource, l);
    assert.equal(e.indexSource, l);
  }
  for (const l of [24, 28, 32, 36]) {
    const e = entry(plan, l);
    assert.equal(e.mode, 'reindex', `layer ${l}`);
    assert.ok(!e.isKvSource && e.isIndexSource && !e.ownsIndexK);
    assert.equal(e.kvSource, 20);
    assert.equal(e.indexSource, l);
  }
  assert.equal(entry(plan, 30).mode, 'reuse');
  assert.equal(entry(plan, 30).indexSource, 28);
  assert.equal(entry(plan, 5).kvSource, 2);
  assert.equal(entry(plan, 19).kvSource, 14);
  assert.equal(entry(plan, 19).indexSource, 14);
  const e25 = entry(plan, 25);
  assert.equal(e25.mode, 'reuse');
  assert.equal(e25.kvSource, 20);
  assert.equal(e25.indexSource, 24);
  assert.equal(e25.compressRatio, 1);
  assert.equal(e25.ropeTheta, 160000);
  assert.equal(e25.yarn, true);
  assert.deepEqual(
    plan.entries.filter((e) => e.usesCandidates).map((e) => e.layer),
    [24, 28, 32, 36],
  );
  assert.deepEqual(
    plan.entries.filter((e) => e.isCandidateSource).map((e) => e.layer),
    [20],
  );
  assert.deepEqual(plan.kvSourceLayers, [2, 8, 14, 20]);
  assert.deepEqual(plan.indexSourceLayers, [2, 8, 14, 20, 24, 28, 32, 36]);
});

test('the tiny-a schedule matches its README table', async () => {
  const plan = buildLayerPlan(await readModelConfigFile(TINY_A));
  assert.deepEqual(
    plan.entries.map((e) => [e.mode, e.kvSource, e.indexSource]),
    [
      ['swa', null, null],
      ['full', 1, 1],
      ['reuse', 1, 1],
      ['full', 3, 3],
      ['reuse', 3, 3],
      ['reindex', 3, 5],
    ],
  );
  assert.deepEqual(
    plan.entries.map((e) => e.isCandidateSource),
    [false, false, false, true, false, false],
  );
  assert.deepEqual(
    plan.entries.map((e) => e.usesCandidates),
    [false, false, false, false, false, true],
  );
  assert.deepEqual(
    plan.entries.map((e) => e.ownsIndexK),
    [false, true, false, true, false, false],
  );
  assert.equal(plan.decoderStart, 3);
  assert.deepEqual(plan.counts, { swa: 1, full: 2, reindex: 1, reuse: 2 });
  assert.equal(entry(plan, 0).ropeTheta, 10000);
  assert.equal(entry(plan, 1).ropeTheta, 160000);
  assert.equal(entry(plan, 1).yarn, true);
});

test('yarn is off when original_seq_len is 0, and decoderStart is null without a ratio-1 tail', async () => {
  const base = JSON.parse(await readFile(TINY_A, 'utf8')) as Record<string, unknown>;
  const noYarn = buildLayerPlan(parseModelConfig({ ...base, original_seq_len: 0 }));
  assert.ok(noYarn.entries.every((e) => !e.yarn));
  // ModelArgs defaults: ratios (0,2,2,1,1), sources (1,3): layer 3 is a ratio-1 KV source with a ratio-1 tail
  assert.equal(buildLayerPlan(parseModelConfig({})).decoderStart, 3);
  // a trailing ratio-0 layer breaks the split
  const tail0 = parseModelConfig({ ...base, n_layers: 7, compress_ratios: [0, 2, 2, 1, 1, 1, 0] });
  assert.equal(buildLayerPlan(tail0).decoderStart, null);
  // no ratio-1 layer at all
  const allTwo = parseModelConfig({
    ...base,
    compress_ratios: [0, 2, 2, 2, 2, 2],
    candidate_source_layer: -1,
  });
  const p = buildLayerPlan(allTwo);
  assert.equal(p.decoderStart, null);
  assert.equal(p.candidateSourceLayer, null);
  assert.ok(p.entries.every((e) => !e.usesCandidates && !e.isCandidateSource));
});

test('invalid schedules give a ConfigError naming the list and the layer', async () => {
  const base = JSON.parse(await readFile(TINY_A, 'utf8')) as Record<string, unknown>;
  const cases: Array<[Record<string, unknown>, string, RegExp]> = [
    // layer 1 has ratio 2 but the first KV source is layer 3
    [{ kv_source_layers: [3], index_source_layers: [1, 3, 5] }, 'kv_source_layers', /layer 1 .*no KV source/],
    // a KV source that is not an index source
    [{ kv_source_layers: [1, 3], index_source_layers: [3, 5] }, 'index_source_layers', /must include every KV source.*layer 1/],
    // a KV source with ratio 0
    [{ kv_source_layers: [0, 1, 3], index_source_layers: [0, 1, 3, 5] }, 'kv_source_layers', /layer 0 .*ratio 0/],
    // an index source with ratio 0
    [{ index_source_layers: [0, 1, 3, 5] }, 'index_source_layers', /layer 0 .*ratio 0/],
    // layer 3 (ratio 1) would read layer 1's ratio-2 KV
    [
      { kv_source_layers: [1], index_source_layers: [1, 5], candidate_source_layer: -1 },
      'kv_source_layers',
      /layer 3 \(compress ratio 1\).*layer 1 \(compress ratio 2\)/,
    ],
    // layer 3 (ratio 1, reuse) would read layer 1's ratio-2 KV: the ratio-1 KV source comes too late
    [
      { compress_ratios: [0, 2, 2, 1, 1, 1], kv_source_layers: [1, 4], index_source_layers: [1, 4, 5], candidate_source_layer: -1 },
      'kv_source_layers',
      /layer 3/,
    ],
    // the candidate source must be an index source
    [{ candidate_source_layer: 4 }, 'candidate_source_layer', /layer 4 must be an index source/],
    // consumers must share the candidate source's ratio
    [
      { compress_ratios: [0, 2, 2, 2, 1, 1], kv_source_layers: [1, 4], index_source_layers: [1, 2, 4, 5], candidate_source_layer: 1 },
      'candidate_source_layer',
      /layer 4 \(compress ratio 1\).*candidates of layer 1 \(compress ratio 2\)/,
    ],
  ];
  for (const [patch, field, message] of cases) {
    const config = parseModelConfig({ ...base, ...patch });
    assert.throws(
      () => buildLayerPlan(config),
      (e: unknown) => {
        assert.ok(e instanceof ConfigError, `${JSON.stringify(patch)}: expected a ConfigError, got ${String(e)}`);
        assert.equal(e.field, field, `${JSON.stringify(patch)}: ${e.message}`);
        assert.match(e.message, message);
        return true;
      },
    );
  }
});

test('ratio-2 reindex layers are valid; a ratio change without its own KV source is refused', async () => {
  const base = JSON.parse(await readFile(TINY_A, 'utf8')) as Record<string, unknown>;
  const config = parseModelConfig({
    ...base,
    compress_ratios: [0, 2, 2, 2, 1, 1],
    kv_source_layers: [1, 4],
    index_source_layers: [1, 3, 4],
    candidate_source_layer: -1,
  });
  const plan = buildLayerPlan(config);
  assert.equal(entry(plan, 3).mode, 'reindex');
  assert.equal(entry(plan, 3).kvSource, 1);
  assert.equal(entry(plan, 3).usesCandidates, false);
  assert.equal(entry(plan, 5).mode, 'reuse');
  assert.equal(entry(plan, 5).indexSource, 4);
  // layer 4 switches back to ratio 2 but the latest KV source (3) is ratio 1
  const mixed = parseModelConfig({
    ...base,
    compress_ratios: [0, 2, 2, 1, 2, 1],
    kv_source_layers: [1, 3],
    index_source_layers: [1, 3],
    candidate_source_layer: -1,
  });
  assert.throws(
    () => buildLayerPlan(mixed),
    (e: unknown) => e instanceof ConfigError && e.field === 'kv_source_layers' && /layer 4/.test(e.message),
  );
});
