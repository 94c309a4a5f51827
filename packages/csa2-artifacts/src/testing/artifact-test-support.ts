/**
 * @module testing/artifact-test-support
 * Test support for the artifact format, writer and reader (not exported from the package): an
 * in-memory ObjectStore that counts its calls, Sequences filled with synthetic but valid FP4 rows
 * (random values through csa2-core's quantizers, block magnitudes from all-zero through the E4M3
 * subnormal range to large), Sequence comparison, and the fixtures directory. Sequences are only
 * touched through format/sequence-rows, like everywhere else in this package.
 */
import assert from 'node:assert/strict';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  SeededRandom,
  dequantizeIndexKRows,
  dequantizeMainKvRows,
  fakeQuantFp4E4m3Block16,
  fakeQuantFp4Ue8m0Block32,
  quantizeIndexKRows,
  quantizeMainKvRows,
  type Sequence,
} from '@csa2/core';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ObjectNotFoundError } from '../errors.js';
import {
  appendPackedRows,
  appendTokenIds,
  emptySequenceFor,
  packedRowsOf,
  sequenceEntryCount,
  sequenceLength,
  sequenceTokenIds,
} from '../format/sequence-rows.js';
import { createArtifactLayout, type ArtifactLayout } from '../layout.js';
import { FsObjectStore } from '../store/fs-store.js';
import { checkListOptions, checkRange, validateKey, validatePrefix } from '../store/keys.js';
import type { ByteRange, ConditionalDeleteResult, GetOptions, ListOptions, ObjectInfo, ObjectStore, PutOptions } from '../store/object-store.js';

/** `$CSA2_FIXTURES_DIR`, or the repository's `fixtures/` folder (dist/testing → repo root is four levels up). */
export function fixturesRoot(): string {
  const env = process.env['CSA2_FIXTURES_DIR'];
  if (env !== undefined && env !== '') return resolve(env);
  return resolve(fileURLToPath(new URL('../../../../fixtures', import.meta.url)));
}

/**
 * An ObjectStore in a Map, with the interface's key rules (store/keys) and call counters. Its clock
 * (`now`, ms) stamps writes and touches; tests move it to age objects. deleteIfUnmodifiedSince is
 * exact here (one synchronous step).
 */
export class MemoryObjectStore implements ObjectStore {
  readonly url = 'memory://test';
  readonly objects = new Map<string, Uint8Array>();
  readonly modifiedMs = new Map<string, number>();
  readonly calls = { put: 0, get: 0, getRange: 0, head: 0, list: 0, delete: 0, touch: 0 };
  /** The store's clock. @defaultValue Date.now */
  now: () => number = () => Date.now();

  private checkKey(key: string): void {
    validateKey(key);
  }

  private info(key: string): ObjectInfo | null {
    const body = this.objects.get(key);
    return body === undefined ? null : { key, sizeBytes: body.length, lastModifiedMs: this.modifiedMs.get(key) ?? 0 };
  }

  async put(key: string, body: Uint8Array, options: PutOptions = {}): Promise<boolean> {
    this.checkKey(key);
    this.calls.put++;
    await Promise.resolve();
    if (options.ifAbsent === true && this.objects.has(key)) return false;
    this.objects.set(key, body.slice());
    this.modifiedMs.set(key, this.now());
    return true;
  }

  async get(key: string, options: GetOptions = {}): Promise<Uint8Array> {
    this.checkKey(key);
    this.calls.get++;
    await Promise.resolve();
    const body = this.objects.get(key);
    if (body === undefined) throw new ObjectNotFoundError(key);
    if (options.into !== undefined && options.into.byteLength >= body.length) {
      const out = options.into.subarray(0, body.length);
      out.set(body);
      return out;
    }
    return body.slice();
  }

  async getRange(key: string, range: ByteRange): Promise<Uint8Array> {
    this.checkKey(key);
    checkRange(range);
    this.calls.getRange++;
    await Promise.resolve();
    const body = this.objects.get(key);
    if (body === undefined) throw new ObjectNotFoundError(key);
    if (range.offset + range.length > body.length) {
      throw new RangeError(`range [${range.offset}, ${range.offset + range.length}) is past the end of ${key} (${body.length} bytes)`);
    }
    return body.slice(range.offset, range.offset + range.length);
  }

  async head(key: string): Promise<ObjectInfo | null> {
    this.checkKey(key);
    this.calls.head++;
    await Promise.resolve();
    return this.info(key);
  }

  async list(prefix: string, options: ListOptions = {}): Promise<ObjectInfo[]> {
    validatePrefix(prefix);
    const limit = checkListOptions(options);
    this.calls.list++;
    const startAfter = options.startAfter ?? '';
    return Array.from(this.objects.keys())
      .filter((k) => k.startsWith(prefix) && k > startAfter)
      .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
      .slice(0, limit)
      .map((k) => this.info(k) as ObjectInfo);
  }

  async delete(key: string): Promise<void> {
    this.checkKey(key);
    this.calls.delete++;
    this.objects.delete(key);
    this.modifiedMs.delete(key);
  }

  async touch(key: string): Promise<ObjectInfo | null> {
    this.checkKey(key);
    this.calls.touch++;
    await Promise.resolve();
    if (!this.objects.has(key)) return null;
    this.modifiedMs.set(key, this.now());
    return this.info(key);
  }

  async deleteIfUnmodifiedSince(key: string, sinceMs: number): Promise<ConditionalDeleteResult> {
    this.checkKey(key);
    await Promise.resolve();
    const info = this.info(key);
    if (info === null) return { outcome: 'absent', sizeBytes: 0 };
    if (info.lastModifiedMs >= sinceMs) return { outcome: 'modified', sizeBytes: info.sizeBytes };
    this.calls.delete++;
    this.objects.delete(key);
    this.modifiedMs.delete(key);
    return { outcome: 'deleted', sizeBytes: info.sizeBytes };
  }

  async ping(): Promise<void> {}

  async close(): Promise<void> {}

  /** Sum of the sizes of objects whose key starts with `prefix`. */
  bytesUnder(prefix: string): number {
    let total = 0;
    for (const [k, v] of this.objects) if (k.startsWith(prefix)) total += v.length;
    return total;
  }
}

/** How the magnitude of one synthetic block is drawn. */
function blockMagnitude(rng: SeededRandom): number {
  const u = rng.nextUniform();
  if (u < 0.05) return 0; // all-zero block
  if (u < 0.3) return 2 ** (-16 + 10 * rng.nextUniform()); // tiny: E4M3 subnormal scales (block max < 6·2^-6)
  return 2 ** (-6 + 10 * rng.nextUniform()); // normal range
}

/** Random values whose blocks of `block` elements have magnitudes from all-zero through tiny to large; 1 in 32 is -0. */
function randomRawRows(rng: SeededRandom, rows: number, dim: number, block: number): Float32Array {
  const values = new Float32Array(rows * dim);
  for (let b = 0; b < values.length; b += block) {
    const magnitude = blockMagnitude(rng);
    for (let i = b; i < b + block; i++) {
      const x = rng.nextU32();
      values[i] = (x & 31) === 0 ? -0 : ((x >>> 5) / 2 ** 26 - 1) * magnitude;
    }
  }
  return values;
}

/**
 * `rows` random rows of width `dim`, fake-quantized as main KV (E2M1 + E4M3 per 16) or index K
 * (MXFP4): exactly the values the model's quantization points produce. Some elements are ±0.
 */
export function randomFakeQuantRows(rng: SeededRandom, rows: number, dim: number, kind: 'main-kv' | 'index-k'): Float32Array {
  const values = randomRawRows(rng, rows, dim, kind === 'main-kv' ? 16 : 32);
  if (kind === 'main-kv') fakeQuantFp4E4m3Block16(values, dim);
  else fakeQuantFp4Ue8m0Block32(values, dim);
  return values;
}

/**
 * `rows` random PACKED rows (the chunk codec's row bytes) as csa2-core's quantizers emit them, with
 * the block magnitudes of randomFakeQuantRows (so the temporary float adapter's scale search is exercised).
 */
export function randomPackedRows(rng: SeededRandom, rows: number, layout: ArtifactLayout, kind: 'main-kv' | 'index-k'): Uint8Array {
  if (kind === 'main-kv') return quantizeMainKvRows(randomRawRows(rng, rows, layout.headDim, 16), layout.headDim);
  return quantizeIndexKRows(randomRawRows(rng, rows, layout.indexHeadDim, 32), layout.indexHeadDim);
}

/** An empty Sequence for `layout` (window 8). */
export function emptySequence(layout: ArtifactLayout): Sequence {
  return emptySequenceFor(layout, 8);
}

/**
 * A Sequence for `layout` holding `tokenCount` random tokens (some near 2^32) and floor(n/m) random
 * packed rows per source.
 */
export function syntheticSequence(layout: ArtifactLayout, tokenCount: number, seed: number): Sequence {
  const rng = new SeededRandom(seed);
  const seq = emptySequence(layout);
  const ids = new Array<number>(tokenCount);
  for (let i = 0; i < tokenCount; i++) ids[i] = i % 7 === 3 ? 2 ** 32 - 1 - (rng.nextU32() % 1000) : rng.nextU32() % 130000;
  appendTokenIds(seq, ids);
  for (const s of layout.kvSources) {
    const rows = Math.floor(tokenCount / s.ratio);
    appendPackedRows(seq, layout, s.layer, randomPackedRows(rng, rows, layout, 'main-kv'), randomPackedRows(rng, rows, layout, 'index-k'));
  }
  return seq;
}

/** The token ids of a Sequence (a copy). */
export function tokensOf(seq: Sequence): number[] {
  return Array.from(sequenceTokenIds(seq));
}

/** A new Sequence with the first `tokenCount` tokens of `seq` and the rows they complete (copies). */
export function sequencePrefix(seq: Sequence, layout: ArtifactLayout, tokenCount: number): Sequence {
  const out = emptySequence(layout);
  growTo(out, seq, layout, tokenCount);
  return out;
}

/** Asserts two byte arrays are equal, reporting the first difference. */
export function assertSameBytes(actual: Uint8Array, expected: Uint8Array, label: string): void {
  assert.equal(actual.length, expected.length, `${label}: length`);
  for (let i = 0; i < actual.length; i++) {
    if (actual[i] !== expected[i]) assert.fail(`${label}: byte ${i} is 0x${actual[i]?.toString(16)}, expected 0x${expected[i]?.toString(16)}`);
  }
}

function bitsOf(values: Float32Array): Uint32Array {
  return new Uint32Array(values.buffer, values.byteOffset, values.length);
}

/** Asserts two Float32Arrays hold the same bits (so -0 ≠ +0), reporting the first difference. */
export function assertSameBits(actual: Float32Array, expected: Float32Array, label: string): void {
  assert.equal(actual.length, expected.length, `${label}: length`);
  const a = bitsOf(actual);
  const e = bitsOf(expected);
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== e[i]) assert.fail(`${label}: element ${i} is ${actual[i]} (0x${a[i]?.toString(16)}), expected ${expected[i]} (0x${e[i]?.toString(16)})`);
  }
}

/**
 * Asserts `actual` holds exactly `expected`'s first `tokenCount` tokens and the rows they complete.
 * `compare: 'bytes'` (the default) compares packed bytes; `'values'` compares the dequantized values
 * bit for bit, for artifacts that hold another valid encoding of the same values (an all-zero block
 * under another scale byte decodes to the same zeros from other bytes).
 */
export function assertSequencePrefix(
  actual: Sequence,
  expected: Sequence,
  layout: ArtifactLayout,
  tokenCount = sequenceLength(expected),
  compare: 'bytes' | 'values' = 'bytes',
): void {
  assert.deepEqual(sequenceTokenIds(actual), sequenceTokenIds(expected, 0, tokenCount), 'tokens');
  for (const s of layout.kvSources) {
    const rows = Math.floor(tokenCount / s.ratio);
    assert.equal(sequenceEntryCount(actual, s.layer), rows, `layer ${s.layer} rows`);
    const got = packedRowsOf(actual, layout, s.layer);
    const want = packedRowsOf(expected, layout, s.layer, 0, rows);
    if (compare === 'bytes') {
      assertSameBytes(got.mainKvU8, want.mainKvU8, `layer ${s.layer} main KV`);
      assertSameBytes(got.indexKU8, want.indexKU8, `layer ${s.layer} index K`);
    } else {
      assertSameBits(dequantizeMainKvRows(got.mainKvU8, layout.headDim), dequantizeMainKvRows(want.mainKvU8, layout.headDim), `layer ${s.layer} main KV`);
      assertSameBits(
        dequantizeIndexKRows(got.indexKU8, layout.indexHeadDim),
        dequantizeIndexKRows(want.indexKU8, layout.indexHeadDim),
        `layer ${s.layer} index K`,
      );
    }
  }
}

/**
 * Grows `seq` (a prefix of `full`) to `tokenCount` tokens, appending the tokens and the rows they
 * complete, as an encoder does.
 */
export function growTo(seq: Sequence, full: Sequence, layout: ArtifactLayout, tokenCount: number): void {
  appendTokenIds(seq, sequenceTokenIds(full, sequenceLength(seq), tokenCount));
  for (const s of layout.kvSources) {
    const have = sequenceEntryCount(seq, s.layer);
    const want = Math.floor(tokenCount / s.ratio);
    const rows = packedRowsOf(full, layout, s.layer, have, want - have);
    appendPackedRows(seq, layout, s.layer, rows.mainKvU8, rows.indexKU8);
  }
}

/** A store a test opened, and how to remove it. */
export interface OpenedTestStore {
  readonly store: ObjectStore;
  cleanup(): Promise<void>;
}

/** The backends every writer/reader test runs against: the in-memory fake and the filesystem store. */
export const STORE_FACTORIES: ReadonlyArray<{ readonly name: string; open(): Promise<OpenedTestStore> }> = [
  {
    name: 'memory',
    async open() {
      return { store: new MemoryObjectStore(), cleanup: async () => undefined };
    },
  },
  {
    name: 'fs',
    async open() {
      const root = await mkdtemp(join(tmpdir(), 'csa2-artifacts-test-'));
      const store = new FsObjectStore(root, { durable: false });
      return {
        store,
        cleanup: async () => {
          await store.close();
          await rm(root, { recursive: true, force: true });
        },
      };
    },
  },
];

/** Runs `body` with a fresh store of each backend (cleaned up afterwards). */
export async function withStore(open: () => Promise<OpenedTestStore>, body: (store: ObjectStore) => Promise<void>): Promise<void> {
  const opened = await open();
  try {
    await body(opened.store);
  } finally {
    await opened.cleanup();
  }
}

/**
 * Wraps a store: optional delay per call, the most puts / gets in flight at once, and the order of
 * puts with the number of puts in flight when each started.
 */
export class TrackingStore implements ObjectStore {
  readonly url: string;
  readonly putLog: Array<{ key: string; putsInFlight: number }> = [];
  maxPutsInFlight = 0;
  maxGetsInFlight = 0;
  /** The sizeBytesHint of every get, in call order. */
  readonly getHints: Array<number | undefined> = [];
  /** Distinct buffers given to gets as `into`, and distinct buffers of chunk put bodies. */
  readonly getIntoBuffers = new Set<ArrayBufferLike>();
  readonly chunkPutBuffers = new Set<ArrayBufferLike>();
  private puts = 0;
  private gets = 0;

  constructor(
    readonly inner: ObjectStore,
    readonly delayMs = 0,
  ) {
    this.url = inner.url;
  }

  private async pause(): Promise<void> {
    if (this.delayMs > 0) await new Promise((r) => setTimeout(r, this.delayMs));
  }

  async put(key: string, body: Uint8Array, options?: PutOptions): Promise<boolean> {
    this.putLog.push({ key, putsInFlight: this.puts });
    if (key.includes('/chunks/')) this.chunkPutBuffers.add(body.buffer);
    this.puts++;
    this.maxPutsInFlight = Math.max(this.maxPutsInFlight, this.puts);
    try {
      await this.pause();
      return await this.inner.put(key, body, options);
    } finally {
      this.puts--;
    }
  }

  async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    this.getHints.push(options?.sizeBytesHint);
    if (options?.into !== undefined) this.getIntoBuffers.add(options.into.buffer);
    this.gets++;
    this.maxGetsInFlight = Math.max(this.maxGetsInFlight, this.gets);
    try {
      await this.pause();
      return await this.inner.get(key, options);
    } finally {
      this.gets--;
    }
  }

  getRange(key: string, range: ByteRange): Promise<Uint8Array> {
    return this.inner.getRange(key, range);
  }
  head(key: string): Promise<ObjectInfo | null> {
    return this.inner.head(key);
  }
  list(prefix: string, options?: ListOptions): Promise<ObjectInfo[]> {
    return this.inner.list(prefix, options);
  }
  touch(key: string): Promise<ObjectInfo | null> {
    return this.inner.touch(key);
  }
  deleteIfUnmodifiedSince(key: string, sinceMs: number): Promise<ConditionalDeleteResult> {
    return this.inner.deleteIfUnmodifiedSince(key, sinceMs);
  }
  delete(key: string): Promise<void> {
    return this.inner.delete(key);
  }
  ping(): Promise<void> {
    return this.inner.ping();
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

/** Sum of the sizes of the objects under `prefix`. */
export async function bytesUnder(store: ObjectStore, prefix: string): Promise<number> {
  return (await store.list(prefix)).reduce((sum, o) => sum + o.sizeBytes, 0);
}

/**
 * The small layout the writer and reader tests share: ratios 2 and 1, C = 64, and a document of
 * 3·C + 37 tokens (odd, so the last ratio-2 group stays open).
 */
export const TEST_LAYOUT: ArtifactLayout = createArtifactLayout({
  modelId: 'model-a',
  headDim: 32,
  indexHeadDim: 32,
  kvSources: [
    { layer: 1, ratio: 2 },
    { layer: 3, ratio: 1 },
  ],
  candidateBlockTokens: 4,
});
export const TEST_CHUNK_TOKENS = 64;
export const TEST_DOC_TOKENS = 3 * TEST_CHUNK_TOKENS + 37;
/** The tenant the artifact tests write under. */
export const TEST_TENANT = 'acme';
