/**
 * @module reader.tiny-model.test
 * End to end on a real checkpoint (the tiny-a fixture made with the official reference): the
 * encoder's own rows go through writer → store → reader bit for bit, and a sequence restored from the
 * artifact continues exactly like the one that was encoded (encoder replay + decoder replay give the
 * same next-token logits).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SeededRandom, loadModel, type Sequence } from '@csa2/core';
import { artifactLayout } from './layout.js';
import { ArtifactReader } from './reader.js';
import { ArtifactWriter } from './writer.js';
import { appendPackedRows, appendTokenIds, packedRowsOf, sequenceTokenIds } from './format/sequence-rows.js';
import { MemoryObjectStore, assertSequencePrefix, fixturesRoot } from './testing/artifact-test-support.js';

test('tiny-a: encoded rows survive the artifact bit for bit, and the restored sequence decodes identically', async (t) => {
  const model = await loadModel(`${fixturesRoot()}/deepseek-v41-tiny-a`, { chunkTokens: 16 });
  const layout = artifactLayout(model.config, model.plan, 'tiny-a-reference');
  const chunkTokens = 16; // multiple of ratios 2 and 1 and of the candidate block (4 × ratio 1)
  const rng = new SeededRandom(41);
  const ids = Array.from({ length: 3 * chunkTokens + 13 }, () => rng.nextU32() % model.config.vocabSize);

  const store = new MemoryObjectStore();
  const encoded = model.createSequence();
  const writer = new ArtifactWriter({ store, layout, tenant: 'acme', documentId: 'tiny', chunkTokens });
  const progress: Promise<void>[] = [];
  const stream = await model.encode(encoded, ids, {
    replayTokens: 1,
    keepRows: ids.length,
    onProgress: (done) => void progress.push(writer.writeAvailable(encoded, done)),
  });
  await Promise.all(progress);
  assert.ok(progress.length >= 3, 'the encoder reported progress per 16-token chunk');
  const manifest = await writer.finish(encoded);
  const logitsEncoded = await model.decoderReplay(encoded, stream);

  const reader = new ArtifactReader({ store, layout });
  const restored: Sequence = model.createSequence();
  await reader.loadInto(restored, await reader.readManifest('acme', 'tiny'));
  assertSequencePrefix(restored, encoded, layout);
  t.diagnostic(`${ids.length} tokens, ${manifest.chunks.length} chunks, ${writer.stats.chunkBytesWritten} B`);

  const replay = await model.encode(restored, [], { replayTokens: ids.length, keepRows: ids.length });
  const logitsRestored = await model.decoderReplay(restored, replay);
  assert.equal(logitsRestored.length, logitsEncoded.length);
  assert.deepEqual(Array.from(logitsRestored), Array.from(logitsEncoded));

  // Control: the comparison is sensitive to the restored rows (one main-KV byte changed → other logits).
  const tampered: Sequence = model.createSequence();
  appendTokenIds(tampered, sequenceTokenIds(restored));
  for (const [i, s] of layout.kvSources.entries()) {
    const rows = packedRowsOf(restored, layout, s.layer);
    const main = rows.mainKvU8.slice();
    if (i === 0) main[3 * layout.mainKvRowBytes] = (main[3 * layout.mainKvRowBytes] ?? 0) ^ 0x11; // two payload nibbles of entry 3
    appendPackedRows(tampered, layout, s.layer, main, rows.indexKU8);
  }
  const logitsTampered = await model.decoderReplay(tampered, await model.encode(tampered, [], { replayTokens: ids.length, keepRows: ids.length }));
  assert.notDeepEqual(Array.from(logitsTampered), Array.from(logitsEncoded));
});
