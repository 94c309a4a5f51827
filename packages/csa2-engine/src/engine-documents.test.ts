/**
 * Documents through the engine: ingest into a filesystem store, continue a stored document, reuse of
 * stored leading chunks, and refusal of damaged or missing artifacts. Model: tiny-a (fixtures).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { collectGarbage, openStore } from '@csa2/artifacts';
import { klDivergence, knownSourceStats, SeededRandom } from '@csa2/core';
import { fixturesRoot } from '@csa2/core/testing';
import { existsSync, rmSync } from 'node:fs';
import { Engine } from './engine.js';
import { replayChunkRows } from './scheduler/generate-work.js';

const TINY = join(fixturesRoot(), 'deepseek-v41-tiny-a');
const root = mkdtempSync(join(tmpdir(), 'csa2-engine-docs-'));
const STORE = pathToFileURL(join(root, 'store')).href;
const greedy = { temperature: 0, topP: 1, seed: 0 };
let engine: Engine;

function randomIds(n: number, seed: number): number[] {
  const rng = new SeededRandom(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(rng.nextUniform() * 250));
}
const DOC = randomIds(150, 11);
const PROMPT = randomIds(9, 12);

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs((a[i] as number) - (b[i] as number)));
  return d;
}

before(async () => {
  engine = await Engine.open({ modelDir: TINY, store: STORE, chunkTokens: 32 });
});
after(async () => {
  await engine.close();
});

test('ingest writes chunks and a manifest once; a second run writes nothing', async () => {
  const progress: number[] = [];
  const first = await engine.ingest({ tenant: 'acme', documentId: 'doc1', tokenIds: DOC }, { onProgress: (p) => progress.push(p.tokensDone) });
  assert.equal(first.tokens, 150);
  assert.equal(first.chunksWritten, 5, '4 full chunks of 32 + the partial one');
  assert.equal(first.bytesPerToken, 79.5);
  assert.ok(first.tailBytes > 0 && first.tailReplayTokens === 128, 'the encoder tail for the default replay is stored');
  assert.ok(first.bytesWritten > 0 && first.artifactBytes + first.tailBytes >= first.bytesWritten);
  assert.equal(progress.at(-1), 150);
  assert.ok(
    progress.every((v, i) => i === 0 || v >= (progress[i - 1] as number)),
    'progress never goes back',
  );
  const again = await engine.ingest({ tenant: 'acme', documentId: 'doc1', tokenIds: DOC });
  assert.equal(again.bytesWritten, 0);
  assert.equal(again.chunksSkipped, 5);
  assert.equal(again.artifactBytes, first.artifactBytes);
});

test('continuing a stored document with R >= its length equals exact generation over the same tokens', async () => {
  const R = DOC.length + PROMPT.length;
  const stored = await engine.generate({
    promptIds: PROMPT,
    document: { tenant: 'acme', documentId: 'doc1' },
    maxTokens: 8,
    sampling: greedy,
    replayTokens: R,
    keepLogits: true,
    ignoreEos: true,
  });
  const exact = await engine.generate({ promptIds: [...DOC, ...PROMPT], maxTokens: 8, sampling: greedy, exact: true, keepLogits: true, ignoreEos: true });
  assert.deepEqual(stored.tokens, exact.tokens);
  assert.equal(stored.cachedTokens, 150);
  assert.equal(stored.promptTokens, 159);
  stored.logits.forEach((row, i) => assert.ok(maxAbsDiff(row, exact.logits[i] as Float32Array) <= 1e-6, `logits row ${i}`));
});

test('bounded replay: deviation from exact generation as R varies (reported), none once R covers the receptive field', async (t) => {
  // tiny-a: window 8, encoder layers 0-2 and decoder layers 3-5. The decoder's last row sees at most
  // 3 * 8 positions back through its windows, and each of those stream rows sees 3 * 8 more through
  // the encoder's, so a replay of 48 tokens reproduces exact generation; shorter replays start from
  // empty windows and deviate.
  const exact = await engine.generate({ promptIds: [...DOC, ...PROMPT], maxTokens: 8, sampling: greedy, exact: true, keepLogits: true, ignoreEos: true });
  const rows: string[] = [];
  const meanKl = new Map<number, number>();
  for (const R of [1, 4, 8, 24, 48, 128]) {
    const r = await engine.generate({
      promptIds: PROMPT,
      document: { tenant: 'acme', documentId: 'doc1' },
      maxTokens: 8,
      sampling: greedy,
      replayTokens: R,
      keepLogits: true,
      ignoreEos: true,
      forceIds: exact.tokens,
    });
    const kls = r.logits.map((row, i) => klDivergence(exact.logits[i] as Float32Array, row));
    const maxDiff = Math.max(...r.logits.map((row, i) => maxAbsDiff(row, exact.logits[i] as Float32Array)));
    meanKl.set(R, kls.reduce((a, b) => a + b, 0) / kls.length);
    rows.push(`R=${R}: mean KL ${(meanKl.get(R) as number).toExponential(2)}, max |dlogit| ${maxDiff.toExponential(2)}`);
  }
  t.diagnostic(`replay deviation vs exact over 8 teacher-forced steps (doc 150 + prompt 9 tokens): ${rows.join('; ')}`);
  assert.ok((meanKl.get(1) as number) > 0, 'a 1-token replay must deviate (windows start empty)');
  assert.ok((meanKl.get(1) as number) < 0.1, 'even a 1-token replay stays close (the global KV is exact)');
  assert.ok((meanKl.get(24) as number) < (meanKl.get(1) as number), 'a longer replay deviates less');
  assert.equal(meanKl.get(48), 0, 'R = 2 x 3 layers x window is exact');
  assert.equal(meanKl.get(128), 0, 'the default R is exact for this model');
});

test('questions on a cached document start from its stored encoder tail: the tokens and logits of encoding it again, bit for bit', async () => {
  // tiny-a: window 8, top-k 4, encoder ratios 2: the tail is reusable from R = 8 on (150 tokens hold top-k entries)
  const cached = await Engine.open({ modelDir: TINY, store: STORE, chunkTokens: 32 });
  const uncached = await Engine.open({ modelDir: TINY, store: STORE, chunkTokens: 32, documentCacheBytes: 0 });
  try {
    const ask = (e: Engine, promptIds: number[], R: number) =>
      e.generate({
        promptIds,
        document: { tenant: 'acme', documentId: 'doc1' },
        maxTokens: 6,
        sampling: greedy,
        replayTokens: R,
        keepLogits: true,
        ignoreEos: true,
      });
    const questions = [randomIds(7, 21), randomIds(12, 22), randomIds(1, 23)];
    const knownRows = knownSourceStats.rows;
    for (const R of [8, 24]) {
      for (const [i, q] of questions.entries()) {
        const fromTail = await ask(cached, q, R); // the first question of each R encodes the tail and stores it
        const encoded = await ask(uncached, q, R); // no document cache: every question encodes its tail
        assert.deepEqual(fromTail.tokens, encoded.tokens, `R ${R}, question ${i}: tokens`);
        fromTail.logits.forEach((row, j) => assert.deepEqual(row, encoded.logits[j], `R ${R}, question ${i}: logits row ${j}`));
      }
    }
    const stats = cached.stats().documentCache;
    assert.deepEqual([stats.tailsStored, stats.tailHits], [2, 4], 'one tail per R, used by the later questions');
    // and their decoder replays took the candidate source's picks of document rows from the tail: the
    // first question's replay covered the document's last R - 7 rows, which later replays share
    assert.ok(knownSourceStats.rows - knownRows > 0, `document rows whose candidate-source picks were known: ${knownSourceStats.rows - knownRows}`);
    // below the window the tail depends on the question: none is stored
    await ask(cached, questions[0] as number[], 4);
    assert.equal(cached.stats().documentCache.tailsStored, 2);
  } finally {
    await cached.close();
    await uncached.close();
  }
});

test('the encoder tail stored at ingest: the first question of a fresh engine starts after it, with the answers of computing it, bit for bit', async () => {
  const doc = randomIds(150, 41);
  const R = 24;
  const tailed = await engine.ingest({ tenant: 'acme', documentId: 'tailed', tokenIds: doc, tailReplayTokens: R });
  const plain = await engine.ingest({ tenant: 'acme', documentId: 'untailed', tokenIds: doc, tailReplayTokens: 0 });
  assert.ok(tailed.tailBytes > 0 && tailed.tailReplayTokens === R);
  assert.deepEqual([plain.tailBytes, plain.tailReplayTokens], [0, 0]);
  const manifestOf = (id: string) =>
    JSON.parse(readFileSync(join(root, `store/tenants/acme/documents/${id}/manifest.json`), 'utf8')) as {
      tail?: { key: string; sizeBytes: number; replayTokens: number };
    };
  const tail = manifestOf('tailed').tail;
  assert.ok(tail !== undefined && tail.replayTokens === R && tail.sizeBytes === tailed.tailBytes);
  assert.equal(manifestOf('untailed').tail, undefined);
  const tailFile = join(root, 'store/tenants/acme/chunks', tail.key.slice(0, 2), tail.key);
  const tailBytes = readFileSync(tailFile);
  const questions = [randomIds(7, 42), randomIds(12, 43), randomIds(3, 44)];
  const ask = (e: Engine, documentId: string, promptIds: number[]) =>
    e.generate({ promptIds, document: { tenant: 'acme', documentId }, maxTokens: 6, sampling: greedy, replayTokens: R, keepLogits: true, ignoreEos: true });
  // the reference: every question on the document without a stored tail computes it (no document cache)
  const reference = await Engine.open({ modelDir: TINY, store: STORE, chunkTokens: 32, documentCacheBytes: 0 });
  const answers: { tokens: number[]; logits: Float32Array[] }[] = [];
  for (const q of questions) answers.push(await ask(reference, 'untailed', q));
  await reference.close();
  const same = (label: string, got: { tokens: number[]; logits: Float32Array[] }, i: number) => {
    const want = answers[i] as (typeof answers)[number];
    assert.deepEqual(got.tokens, want.tokens, `${label}, question ${i}: tokens`);
    got.logits.forEach((row, j) => assert.deepEqual(row, want.logits[j], `${label}, question ${i}: logits row ${j}`));
  };
  const knownRows = knownSourceStats.rows;
  const cached = await Engine.open({ modelDir: TINY, store: STORE, chunkTokens: 32 });
  const privateCopy = await Engine.open({ modelDir: TINY, store: STORE, chunkTokens: 32, documentCacheBytes: 0 });
  try {
    for (const [i, q] of questions.entries()) {
      same('cached document', await ask(cached, 'tailed', q), i);
      same('private copy', await ask(privateCopy, 'tailed', q), i);
    }
    const s = cached.stats().documentCache;
    assert.deepEqual(
      [s.tailsLoaded, s.tailsStored, s.tailHits, s.tailsRejected],
      [1, 0, 3, 0],
      'read once from the artifact, used by every question, none computed',
    );
    assert.ok(knownSourceStats.rows - knownRows > 0, 'the first question took the stored candidate-source picks of document rows');
  } finally {
    await cached.close();
    await privateCopy.close();
  }
  // a damaged or missing stored tail is not used: the question computes it, with the same answer, and it is counted
  const flipped = Buffer.from(tailBytes);
  flipped[Math.floor(flipped.length / 2)] = (flipped[Math.floor(flipped.length / 2)] as number) ^ 0x04;
  for (const [damage, reason] of [
    [() => writeFileSync(tailFile, flipped), /SHA-256/],
    [() => rmSync(tailFile), /missing/],
  ] as const) {
    damage();
    const fresh = await Engine.open({ modelDir: TINY, store: STORE, chunkTokens: 32 });
    try {
      const answer = await ask(fresh, 'tailed', questions[0] as number[]);
      same('damaged tail', answer, 0);
      assert.match(answer.storedTailRejected ?? '', reason, 'the outcome says why');
      const s = fresh.stats().documentCache;
      assert.deepEqual([s.tailsRejected, s.tailsLoaded, s.tailsStored], [1, 0, 1], 'rejected, then computed and kept in memory');
      assert.match(s.lastTailRejection ?? '', reason);
    } finally {
      await fresh.close();
    }
  }
  // ingesting the document again restores it (the chunks are stored: only the tail is computed)
  const again = await engine.ingest({ tenant: 'acme', documentId: 'tailed', tokenIds: doc, tailReplayTokens: R });
  assert.deepEqual([again.reusedTokens, again.chunksWritten, again.tailBytes], [128, 0, tailed.tailBytes]);
  assert.ok(readFileSync(tailFile).equals(tailBytes), 'the same bytes as the first ingest');
  writeFileSync(tailFile, flipped);
  await engine.ingest({ tenant: 'acme', documentId: 'tailed', tokenIds: doc, tailReplayTokens: R });
  assert.ok(readFileSync(tailFile).equals(tailBytes), 'a rotted stored tail is rewritten by the next ingest');
  // garbage collection keeps the tail while a manifest names it, and reclaims it after
  const store = openStore(STORE);
  try {
    await collectGarbage({ store, graceMs: 0, tenants: ['acme'] });
    assert.ok(existsSync(tailFile), 'named by a manifest: kept');
    await engine.ingest({ tenant: 'acme', documentId: 'tailed', tokenIds: doc, tailReplayTokens: 0 });
    assert.equal(manifestOf('tailed').tail, undefined);
    await new Promise((r) => setTimeout(r, 5)); // older than gc's cutoff (now - 0)
    await collectGarbage({ store, graceMs: 0, tenants: ['acme'] });
    assert.equal(existsSync(tailFile), false, 'named by no manifest: reclaimed');
  } finally {
    await store.close();
  }
});

test('the decoder replay in chunks within the attention-table budget: the logits of one chunk, bit for bit', async () => {
  // tiny-a: (top-k 4 + window 8) × head_dim 64 × 8 bytes = 6 KiB a row; a budget of 1 byte gives the minimum, 16 rows a
  // chunk, as even as can be: 60 rows in 4 chunks of 15, 33 in 3 of 11; 1 GiB: one chunk
  assert.deepEqual([replayChunkRows(engine.model, 60, 1), replayChunkRows(engine.model, 33, 1), replayChunkRows(engine.model, 60, 2 ** 30)], [15, 11, 60]);
  const chunked = await Engine.open({ modelDir: TINY, store: STORE, chunkTokens: 32, documentCacheBytes: 0, scheduler: { replayChunkBytes: 1 } });
  const whole = await Engine.open({ modelDir: TINY, store: STORE, chunkTokens: 32, documentCacheBytes: 0 });
  try {
    const ask = (e: Engine) =>
      e.generate({
        promptIds: PROMPT,
        document: { tenant: 'acme', documentId: 'doc1' },
        maxTokens: 4,
        sampling: greedy,
        replayTokens: 60,
        keepLogits: true,
        ignoreEos: true,
      });
    const s0 = chunked.stats().steps;
    const a = await ask(chunked);
    const chunkedSteps = chunked.stats().steps - s0;
    const w0 = whole.stats().steps;
    const b = await ask(whole);
    assert.ok(chunkedSteps > whole.stats().steps - w0, `the chunked replay took more steps (${chunkedSteps})`);
    assert.deepEqual(a.tokens, b.tokens);
    a.logits.forEach((row, i) => assert.deepEqual(row, b.logits[i], `logits row ${i}`));
  } finally {
    await chunked.close();
    await whole.close();
  }
  await assert.rejects(Engine.open({ modelDir: TINY, scheduler: { replayChunkBytes: 0 } }), /replayChunkBytes must be a positive number/);
});

test('a document can be continued without a prompt, and with the default bounded replay', async () => {
  const out = await engine.generate({ promptIds: [], document: { tenant: 'acme', documentId: 'doc1' }, maxTokens: 4, sampling: greedy, ignoreEos: true });
  assert.equal(out.tokens.length, 4);
  assert.equal(out.cachedTokens, 150);
});

test('a document sharing leading chunks with a stored one reuses them', async () => {
  const doc2 = [...DOC.slice(0, 100), ...randomIds(40, 13)];
  const out = await engine.ingest({ tenant: 'acme', documentId: 'doc2', tokenIds: doc2 });
  assert.equal(out.reusedTokens, 96, 'three full chunks of 32 are shared');
  assert.equal(out.chunksSkipped, 3);
  assert.equal(out.chunksWritten, 2);
  const other = await engine.ingest({ tenant: 'other', documentId: 'doc2', tokenIds: doc2 });
  assert.equal(other.reusedTokens, 0, 'another tenant shares nothing');
});

test('a document of exactly one chunk is re-used when ingested again; a shorter one is encoded again', async () => {
  const one = randomIds(32, 21);
  const first = await engine.ingest({ tenant: 'acme', documentId: 'one-chunk', tokenIds: one });
  assert.deepEqual([first.reusedTokens, first.chunksWritten], [0, 1]);
  const again = await engine.ingest({ tenant: 'acme', documentId: 'one-chunk-again', tokenIds: one });
  assert.deepEqual([again.reusedTokens, again.chunksSkipped, again.chunksWritten], [32, 1, 0], 'its one full chunk is loaded, not encoded');
  const ask = (documentId: string) =>
    engine.generate({ promptIds: PROMPT, document: { tenant: 'acme', documentId }, maxTokens: 4, sampling: greedy, ignoreEos: true });
  const [a, b] = [await ask('one-chunk'), await ask('one-chunk-again')];
  assert.deepEqual(b.tokens, a.tokens, 'the re-used document answers as the encoded one');
  const short = one.slice(0, 31);
  const shortFirst = await engine.ingest({ tenant: 'acme', documentId: 'short', tokenIds: short });
  const shortAgain = await engine.ingest({ tenant: 'acme', documentId: 'short-again', tokenIds: short });
  assert.equal(shortFirst.reusedTokens, 0);
  assert.equal(shortAgain.reusedTokens, 0, 'a partial chunk is never loaded as a shared prefix: the document is encoded again');
  assert.equal(shortAgain.chunksWritten + shortAgain.chunksSkipped, 1, 'its one partial chunk is stored (or found stored, with the same bytes)');
});

test('missing documents, other tenants and damaged chunks are refused with their codes', async () => {
  await assert.rejects(
    engine.generate({ promptIds: PROMPT, document: { tenant: 'acme', documentId: 'nope' }, maxTokens: 1, sampling: greedy }),
    (e: unknown) => (e as { code?: string }).code === 'not-found',
  );
  await assert.rejects(
    engine.generate({ promptIds: PROMPT, document: { tenant: 'intruder', documentId: 'doc1' }, maxTokens: 1, sampling: greedy }),
    (e: unknown) => (e as { code?: string }).code === 'not-found',
  );
  // flip one byte in the middle of every stored chunk of tenant 'other' and read it back through a fresh engine (no cache)
  const chunksDir = join(root, 'store', 'tenants', 'other', 'chunks');
  const files: string[] = [];
  const walk = (d: string) => readdirSync(d).forEach((n) => (statSync(join(d, n)).isDirectory() ? walk(join(d, n)) : files.push(join(d, n))));
  walk(chunksDir);
  assert.ok(files.length > 0);
  for (const f of files) {
    const b = readFileSync(f);
    b[Math.floor(b.length / 2)] = (b[Math.floor(b.length / 2)] as number) ^ 0x10;
    writeFileSync(f, b);
  }
  const fresh = await Engine.open({ modelDir: TINY, store: STORE });
  try {
    await assert.rejects(
      fresh.generate({ promptIds: PROMPT, document: { tenant: 'other', documentId: 'doc2' }, maxTokens: 1, sampling: greedy }),
      (e: unknown) => (e as { code?: string }).code === 'artifact-corrupt',
    );
  } finally {
    await fresh.close();
  }
});

test('ingest verifies the stored chunks it adopts: a corrupt one is encoded again and replaced, for the same or any text sharing it', async () => {
  const doc = randomIds(150, 21); // chunks of 32: four full ones and a partial one
  await engine.ingest({ tenant: 'acme', documentId: 'rot', tokenIds: doc });
  const manifest = JSON.parse(readFileSync(join(root, 'store/tenants/acme/documents/rot/manifest.json'), 'utf8')) as { chunks: { key: string }[] };
  const chunkFile = (i: number): string => {
    const key = manifest.chunks[i]?.key ?? '';
    return join(root, 'store/tenants/acme/chunks', key.slice(0, 2), key);
  };
  const flip = (file: string): void => {
    const b = readFileSync(file);
    b[Math.floor(b.length / 2)] = (b[Math.floor(b.length / 2)] as number) ^ 0x01;
    writeFileSync(file, b);
  };
  flip(chunkFile(1)); // a leading full chunk: adopted by the prefix reuse
  flip(chunkFile(4)); // the trailing partial chunk: written by the writer, which finds it stored
  const fresh = await Engine.open({ modelDir: TINY, store: STORE, chunkTokens: 32 }); // nothing cached
  try {
    await assert.rejects(
      fresh.generate({ promptIds: PROMPT, document: { tenant: 'acme', documentId: 'rot' }, maxTokens: 1, sampling: greedy }),
      (e: unknown) => (e as { code?: string }).code === 'artifact-corrupt',
    );
    // the same text under a new id: chunk 0 is re-used, chunk 1 fails verification, so the rest is encoded
    const again = await fresh.ingest({ tenant: 'acme', documentId: 'rot-again', tokenIds: doc });
    assert.equal(again.reusedTokens, 32, 'the prefix ends at the corrupt chunk');
    assert.equal(again.chunksRepaired, 2, 'the corrupt full chunk and the corrupt partial chunk');
    // both documents read again (the shared chunks are sound now); the old one gives the same tokens
    const a = await fresh.generate({ promptIds: PROMPT, document: { tenant: 'acme', documentId: 'rot' }, maxTokens: 4, sampling: greedy, ignoreEos: true });
    const b = await fresh.generate({
      promptIds: PROMPT,
      document: { tenant: 'acme', documentId: 'rot-again' },
      maxTokens: 4,
      sampling: greedy,
      ignoreEos: true,
    });
    assert.deepEqual(a.tokens, b.tokens);
    // a text that shares the first 96 tokens re-uses all three of its full chunks
    const sharing = await fresh.ingest({ tenant: 'acme', documentId: 'rot-sharing', tokenIds: [...doc.slice(0, 96), ...randomIds(20, 22)] });
    assert.equal(sharing.reusedTokens, 96);
    assert.equal(sharing.chunksRepaired, 0);
  } finally {
    await fresh.close();
  }
});

test('a chunk damaged while an engine holds it in memory: questions name the document, and its next ingest repairs it without a restart', async () => {
  const doc = randomIds(140, 41); // four full chunks of 32 and a partial one
  await engine.ingest({ tenant: 'acme', documentId: 'held', tokenIds: doc });
  const before = await engine.generate({
    promptIds: PROMPT,
    document: { tenant: 'acme', documentId: 'held' },
    maxTokens: 4,
    sampling: greedy,
    ignoreEos: true,
  });
  const manifest = JSON.parse(readFileSync(join(root, 'store/tenants/acme/documents/held/manifest.json'), 'utf8')) as { chunks: { key: string }[] };
  const key = manifest.chunks[2]?.key ?? '';
  const file = join(root, 'store/tenants/acme/chunks', key.slice(0, 2), key);
  const sound = readFileSync(file);
  const b = Buffer.from(sound);
  b[Math.floor(b.length / 2)] = (b[Math.floor(b.length / 2)] as number) ^ 0x04;
  writeFileSync(file, b);
  // another process (a decoder without the chunk in memory) refuses the question, naming the document
  const other = await Engine.open({ modelDir: TINY, store: STORE, chunkTokens: 32 });
  try {
    await assert.rejects(
      other.generate({ promptIds: PROMPT, document: { tenant: 'acme', documentId: 'held' }, maxTokens: 1, sampling: greedy }),
      (e: unknown) => (e as { code?: string }).code === 'artifact-corrupt' && /document held of tenant acme/.test((e as Error).message),
    );
    // the engine that cached the chunk ingests the document again: it reads the store, not its memory, and rewrites the chunk
    const again = await engine.ingest({ tenant: 'acme', documentId: 'held', tokenIds: doc });
    assert.equal(again.chunksRepaired, 1);
    assert.equal(again.reusedTokens, 64, 'the prefix ends at the damaged chunk');
    assert.deepEqual(readFileSync(file), sound, 'the rewritten chunk holds the bytes it held (a chunk is a function of its key)');
    const after = await other.generate({
      promptIds: PROMPT,
      document: { tenant: 'acme', documentId: 'held' },
      maxTokens: 4,
      sampling: greedy,
      ignoreEos: true,
    });
    assert.deepEqual(after.tokens, before.tokens);
  } finally {
    await other.close();
  }
});

test('ingest with a prefix document: its tokens come first and its full chunks are re-used, not encoded', async () => {
  const question = randomIds(70, 31);
  const out = await engine.ingest({ tenant: 'acme', documentId: 'doc1-and-question', tokenIds: question, prefix: { tenant: 'acme', documentId: 'doc1' } });
  assert.equal(out.tokens, DOC.length + question.length);
  assert.equal(out.reusedTokens, 128, 'the four full chunks of doc1');
  const direct = await engine.generate({ promptIds: [...DOC, ...question], maxTokens: 4, sampling: greedy, exact: true, ignoreEos: true });
  const stored = await engine.generate({
    promptIds: [],
    document: { tenant: 'acme', documentId: 'doc1-and-question' },
    maxTokens: 4,
    sampling: greedy,
    replayTokens: 400,
    ignoreEos: true,
  });
  assert.deepEqual(stored.tokens, direct.tokens, 'the artifact holds the document then the question');
  await assert.rejects(
    engine.ingest({ tenant: 'acme', documentId: 'x', tokenIds: question, prefix: { tenant: 'acme', documentId: 'no-such-doc' } }),
    (e: unknown) => (e as { code?: string }).code === 'not-found',
  );
});
