/**
 * @module million-tokens.test
 * A 1,048,576-token artifact (the released config's context) round trip through the filesystem store:
 * write incrementally, find the stored prefix, load it back (whole, as a chunk prefix, tokens only),
 * with a tiny layout so it stays fast. Token arrays of this length break any `push(...ids)` or
 * `f(...ids)` (V8 throws RangeError above ~125K arguments), so this proves no path spreads them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SeededRandom } from '@csa2/core';
import { createArtifactLayout } from './layout.js';
import { appendPackedRows, appendTokenIds, sequenceLength } from './format/sequence-rows.js';
import { FsObjectStore } from './store/fs-store.js';
import { ArtifactReader } from './reader.js';
import { ArtifactWriter, existingChunkPrefix } from './writer.js';
import { assertSequencePrefix, emptySequence, randomPackedRows, tokensOf } from './testing/artifact-test-support.js';

const TOKENS = 1_048_576;
const C = 4096;
/** Two KV sources at large ratios: every token id travels, the rows stay few (8192 + 2048). */
const LAYOUT = createArtifactLayout({
  modelId: 'million',
  headDim: 16,
  indexHeadDim: 32,
  kvSources: [
    { layer: 0, ratio: 128 },
    { layer: 1, ratio: 512 },
  ],
});

test('a 1,048,576-token document: write, prefix lookup, load, chunk-prefix load and token read, no argument spreading', async () => {
  // The guard this test stands on: spreading an array this long throws.
  assert.throws(() => ([] as number[]).push(...new Array<number>(TOKENS).fill(0)), RangeError);

  const root = await mkdtemp(join(tmpdir(), 'csa2-million-'));
  const store = new FsObjectStore(root, { durable: false });
  try {
    const rng = new SeededRandom(14);
    const ids = new Uint32Array(TOKENS);
    for (let i = 0; i < TOKENS; i++) ids[i] = (i * 2654435761) % 129280;
    const seq = emptySequence(LAYOUT);
    appendTokenIds(seq, ids);
    for (const s of LAYOUT.kvSources) {
      const rows = TOKENS / s.ratio;
      appendPackedRows(seq, LAYOUT, s.layer, randomPackedRows(rng, rows, LAYOUT, 'main-kv'), randomPackedRows(rng, rows, LAYOUT, 'index-k'));
    }
    assert.equal(sequenceLength(seq), TOKENS);

    const writer = new ArtifactWriter({ store, layout: LAYOUT, tenant: 'acme', documentId: 'million', chunkTokens: C });
    for (const upto of [100_000, 500_000, TOKENS - 1]) await writer.writeAvailable(seq, upto);
    const manifest = await writer.finish(seq);
    assert.equal(manifest.tokenCount, TOKENS);
    assert.equal(manifest.chunks.length, TOKENS / C);
    assert.equal(writer.stats.chunksWritten, TOKENS / C);

    const idList = Array.from(ids);
    assert.equal(await existingChunkPrefix(store, LAYOUT, 'acme', idList, C), TOKENS / C);
    assert.equal(await existingChunkPrefix(store, LAYOUT, 'acme', ids, C), TOKENS / C, 'a Uint32Array of ids works the same');

    const reader = new ArtifactReader({ store, layout: LAYOUT });
    const loaded = emptySequence(LAYOUT);
    const stats = await reader.loadInto(loaded, await reader.readManifest('acme', 'million'));
    assert.deepEqual([stats.tokensLoaded, stats.chunksLoaded], [TOKENS, TOKENS / C]);
    assertSequencePrefix(loaded, seq, LAYOUT);

    const tokens = await reader.readTokens(manifest);
    assert.equal(tokens.length, TOKENS);
    assert.deepEqual(tokens, tokensOf(seq));

    const prefix = emptySequence(LAYOUT);
    const prefixStats = await reader.loadChunkPrefix(prefix, { tenant: 'acme', tokenIds: ids, chunkTokens: C, chunkCount: TOKENS / C - 1 });
    assert.equal(prefixStats.tokensLoaded, TOKENS - C);
    assertSequencePrefix(prefix, seq, LAYOUT, TOKENS - C);
  } finally {
    await store.close();
    await rm(root, { recursive: true, force: true });
  }
});
