/**
 * @module layout.test
 * layout: row sizes and bytes per token from real configs (890 B at the released one), layout ids, chunk-size rules.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, buildLayerPlan, globalCacheBytesPerToken, readModelConfigFile } from '@csa2/core';
import { DEFAULT_CHUNK_TOKENS, artifactLayout, bytesPerToken, chunkEntryRange, createArtifactLayout, validateChunkTokens } from './layout.js';
import { fixturesRoot } from './testing/artifact-test-support.js';

const FIXTURES = fixturesRoot();

test('the released config: 288 B + 68 B rows, 890 bytes per token, the same as csa2-core', async () => {
  const config = await readModelConfigFile(`${FIXTURES}/deepseek-v41-flash/config.json`);
  const plan = buildLayerPlan(config);
  const layout = artifactLayout(config, plan, 'released-weights-digest');
  assert.deepEqual(layout.kvSources, [
    { layer: 2, ratio: 2 },
    { layer: 8, ratio: 2 },
    { layer: 14, ratio: 2 },
    { layer: 20, ratio: 1 },
  ]);
  assert.equal(layout.mainKvRowBytes, 288);
  assert.equal(layout.indexKRowBytes, 68);
  assert.equal(layout.candidateBlockTokens, 8);
  assert.equal(bytesPerToken(layout), 890);
  assert.equal(bytesPerToken(layout), globalCacheBytesPerToken(config, plan));
  assert.equal(validateChunkTokens(layout, DEFAULT_CHUNK_TOKENS), 4096);
});

test('tiny-a: 36 B + 17 B rows, ratios 2 and 1 → 79.5 bytes per token', async () => {
  const config = await readModelConfigFile(`${FIXTURES}/deepseek-v41-tiny-a/config.json`);
  const layout = artifactLayout(config, buildLayerPlan(config), 'tiny-a');
  assert.equal(layout.mainKvRowBytes, 36);
  assert.equal(layout.indexKRowBytes, 17);
  assert.equal(bytesPerToken(layout), 53 / 2 + 53);
});

test('layoutId is stable for equal inputs and changes with each input', () => {
  const base = {
    modelId: 'm',
    headDim: 64,
    indexHeadDim: 32,
    kvSources: [
      { layer: 1, ratio: 2 },
      { layer: 3, ratio: 1 },
    ],
    candidateBlockTokens: 4,
  };
  const id = createArtifactLayout(base).layoutId;
  assert.match(id, /^[0-9a-f]{16}$/);
  assert.equal(createArtifactLayout({ ...base, modelId: 'other-model' }).layoutId, id, 'the model id is not part of the layout');
  const variants = [
    { ...base, headDim: 128 },
    { ...base, indexHeadDim: 64 },
    {
      ...base,
      kvSources: [
        { layer: 1, ratio: 2 },
        { layer: 3, ratio: 2 },
      ],
    },
    {
      ...base,
      kvSources: [
        { layer: 1, ratio: 2 },
        { layer: 4, ratio: 1 },
      ],
    },
    { ...base, kvSources: [{ layer: 1, ratio: 2 }] },
    { ...base, candidateBlockTokens: 8 },
  ];
  const ids = new Set([id, ...variants.map((v) => createArtifactLayout(v).layoutId)]);
  assert.equal(ids.size, variants.length + 1);
});

test('chunkTokens must be a positive multiple of every ratio and of the candidate block size', () => {
  const layout = createArtifactLayout({
    modelId: 'm',
    headDim: 32,
    indexHeadDim: 32,
    kvSources: [
      { layer: 0, ratio: 4 },
      { layer: 2, ratio: 1 },
    ],
    candidateBlockTokens: 8,
  });
  assert.equal(validateChunkTokens(layout, 16), 16);
  assert.equal(validateChunkTokens(layout, 8), 8);
  assert.throws(
    () => validateChunkTokens(layout, 6),
    (e: unknown) => e instanceof ConfigError && /chunkTokens/.test(e.message) && /6 is not a multiple of ratio 4/.test(e.message),
  );
  assert.throws(
    () => validateChunkTokens(layout, 12),
    (e: unknown) => e instanceof ConfigError && /12 is not a multiple of 8 tokens/.test(e.message) && /candidate block/.test(e.message),
  );
  for (const bad of [0, -8, 8.5, Number.NaN]) {
    assert.throws(
      () => validateChunkTokens(layout, bad),
      (e: unknown) => e instanceof ConfigError && e.message.includes(String(bad)) && /positive integer/.test(e.message),
    );
  }
  const noHsi = createArtifactLayout({ modelId: 'm', headDim: 32, indexHeadDim: 32, kvSources: [{ layer: 0, ratio: 2 }] });
  assert.equal(validateChunkTokens(noHsi, 2), 2);
});

test('a candidate source with ratio 2 needs chunks of whole candidate blocks in tokens', async () => {
  const config = await readModelConfigFile(`${FIXTURES}/deepseek-v41-tiny-a/config.json`);
  const hsiOnRatio2 = { ...config, compressRatios: [0, 2, 2, 2, 2, 2], candidateSourceLayer: 1 };
  const layout = artifactLayout(hsiOnRatio2, buildLayerPlan(hsiOnRatio2), 'tiny');
  assert.equal(layout.candidateBlockTokens, config.candidateBlockSize * 2);
  assert.throws(() => validateChunkTokens(layout, config.candidateBlockSize), ConfigError);
  assert.equal(validateChunkTokens(layout, config.candidateBlockSize * 2), config.candidateBlockSize * 2);
});

test('model ids and layouts are validated', () => {
  const ok = { modelId: 'm', headDim: 32, indexHeadDim: 32, kvSources: [{ layer: 0, ratio: 1 }] };
  assert.throws(() => createArtifactLayout({ ...ok, modelId: '' }), /modelId/);
  assert.throws(() => createArtifactLayout({ ...ok, modelId: 'x'.repeat(65) }), /modelId/);
  assert.throws(() => createArtifactLayout({ ...ok, modelId: 'has space' }), /modelId/);
  assert.throws(() => createArtifactLayout({ ...ok, modelId: 'modèle' }), /modelId/);
  assert.equal(createArtifactLayout({ ...ok, modelId: 'x'.repeat(64) }).modelId.length, 64);
  assert.throws(() => createArtifactLayout({ ...ok, headDim: 24 }), /headDim.*multiple of 16/);
  assert.throws(() => createArtifactLayout({ ...ok, indexHeadDim: 48 }), /indexHeadDim.*multiple of 32/);
  assert.throws(() => createArtifactLayout({ ...ok, kvSources: [] }), /at least one/);
  assert.throws(
    () =>
      createArtifactLayout({
        ...ok,
        kvSources: [
          { layer: 3, ratio: 1 },
          { layer: 2, ratio: 1 },
        ],
      }),
    /ascending/,
  );
  assert.throws(() => createArtifactLayout({ ...ok, kvSources: [{ layer: 0, ratio: 0 }] }), /ratio/);
});

test('chunkEntryRange: the entries completed inside a chunk', () => {
  assert.deepEqual(chunkEntryRange(2, 0, 16), { firstEntry: 0, entryCount: 8 });
  assert.deepEqual(chunkEntryRange(2, 48, 85), { firstEntry: 24, entryCount: 18 }); // token 84 opens entry 42, not complete
  assert.deepEqual(chunkEntryRange(1, 48, 85), { firstEntry: 48, entryCount: 37 });
  assert.deepEqual(chunkEntryRange(4, 48, 49), { firstEntry: 12, entryCount: 0 });
});
