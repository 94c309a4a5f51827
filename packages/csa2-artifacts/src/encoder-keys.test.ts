/**
 * Encoders whose numerics differ never share chunks: a layout's encoder name is hashed into every chunk
 * key and named in the manifest, and a reader of the model reads documents of any encoder.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '@csa2/core';
import { createArtifactLayout } from './layout.js';
import { chunkKey, fullChunkKeys } from './format/chunk-key.js';
import { parseManifest, encodeManifest } from './format/manifest.js';
import { ArtifactReader } from './reader.js';
import { ArtifactWriter, existingChunkPrefix } from './writer.js';
import {
  STORE_FACTORIES,
  assertSequencePrefix,
  emptySequence,
  syntheticSequence,
  withStore,
  TEST_LAYOUT as LAYOUT,
  TEST_CHUNK_TOKENS as C,
  TEST_DOC_TOKENS as DOC_TOKENS,
  TEST_TENANT as TENANT,
  tokensOf,
} from './testing/artifact-test-support.js';

const CUDA_LAYOUT = createArtifactLayout({
  modelId: LAYOUT.modelId,
  encoder: 'cuda',
  headDim: LAYOUT.headDim,
  indexHeadDim: LAYOUT.indexHeadDim,
  kvSources: LAYOUT.kvSources,
  candidateBlockTokens: LAYOUT.candidateBlockTokens,
});

test('the encoder name enters the key: the same tokens under two encoders get two keys, the reference encoder the empty name', () => {
  const ids = [5, 6, 7, 8];
  assert.notEqual(chunkKey('m', null, ids, 'cuda'), chunkKey('m', null, ids));
  assert.equal(chunkKey('m', null, ids, ''), chunkKey('m', null, ids));
  assert.notDeepEqual(fullChunkKeys('m', ids, 2, Infinity, 'cuda'), fullChunkKeys('m', ids, 2));
  assert.equal(CUDA_LAYOUT.encoder, 'cuda');
  assert.equal(LAYOUT.encoder, '');
  assert.equal(CUDA_LAYOUT.layoutId, LAYOUT.layoutId, 'the bytes a row holds are the same format');
  for (const bad of ['CUDA', '-x', 'a b', 'x'.repeat(17)]) assert.throws(() => chunkKey('m', null, ids, bad), ConfigError, bad);
});

for (const factory of STORE_FACTORIES) {
  test(`${factory.name}: a document written by the cuda encoder is read by the reference encoder's reader; neither finds the other's chunks`, async () => {
    await withStore(factory.open, async (store) => {
      const seq = syntheticSequence(CUDA_LAYOUT, DOC_TOKENS, 3);
      const manifest = await new ArtifactWriter({ store, layout: CUDA_LAYOUT, tenant: TENANT, documentId: 'gpu-doc', chunkTokens: C }).finish(seq);
      assert.equal(manifest.encoder, 'cuda');
      assert.equal(parseManifest('k', encodeManifest(manifest)).encoder, 'cuda', 'the manifest keeps the encoder');
      const loaded = emptySequence(LAYOUT);
      await new ArtifactReader({ store, layout: LAYOUT }).loadInto(loaded, manifest);
      assertSequencePrefix(loaded, seq, LAYOUT, DOC_TOKENS);
      const ids = tokensOf(seq);
      assert.equal(await existingChunkPrefix(store, LAYOUT, TENANT, ids, C), 0, 'the reference encoder does not adopt cuda chunks');
      assert.ok((await existingChunkPrefix(store, CUDA_LAYOUT, TENANT, ids, C)) > 0, 'the cuda encoder adopts its own');
    });
  });
}
