/**
 * @module artifacts-bench
 * Cache-artifact throughput: a synthetic document of the released layout (4 KV
 * sources, 890 B of global cache per token) written to and read back from the filesystem store and
 * a local S3 server (s3rver), side by side in one run, with the bytes per token on the store (headers,
 * token ids and manifest included).
 *
 * Two paths, in the same run:
 * - `packed` (codec + store, bytes in, bytes out): rows are packed FP4 bytes as the model emits them;
 *   write = encodeChunkAsync into a reused buffer (header + copy + SHA-256 in slices that yield to
 *   the event loop) + put (ifAbsent, as the writer puts), `inFlight` puts at once, encoding
 *   overlapping them; read = ArtifactReader.visitChunks
 *   (get with the manifest's size hint into a reused buffer + full verification: codec checks,
 *   SHA-256, manifest size/checksum, content key), `inFlight` gets at once.
 * - `float` (the path before sequences held packed rows, kept to compare with): write = exact FP4
 *   repacking of dequantized rows (legacy-row-packing, with its round-trip check and scale search) +
 *   encode + put; read = get + verify + unpack to float32. Filesystem only by default: it is the slow one.
 *
 * "Where the time goes" is measured in the same process: node's SHA-256 and a buffer copy on one
 * chunk's bytes, then the per-stage times of the packed path (encode, put, get, verify). The chunk
 * objects were just written, so filesystem reads come from the page cache (memory speed is the point).
 *
 * Rows cycle through two templates (random values through csa2-core's quantizers); the token ids
 * differ per chunk, so every chunk is a distinct object.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ArtifactReader,
  BufferPool,
  artifactLayout,
  bytesPerToken,
  chunkKey,
  chunkObjectKey,
  chunkObjectBytes,
  decodeChunk,
  encodeChunkAsync,
  encodeManifest,
  manifestObjectKey,
  FsObjectStore,
  S3ObjectStore,
  MANIFEST_FORMAT_VERSION,
  type ArtifactLayout,
  type ChunkSourceRows,
  type DocumentManifest,
  type ManifestChunk,
  type ObjectStore,
} from '@csa2/artifacts';
import { startS3Server } from '@csa2/artifacts/testing';
import { buildLayerPlan, dequantizeIndexKRows, dequantizeMainKvRows, parseModelConfig, quantizeIndexKRows, quantizeMainKvRows, SeededRandom } from '@csa2/core';
import { fixturesRoot } from '@csa2/core/testing';
import { packIndexKRows, packMainKvRows, unpackIndexKRows, unpackMainKvRows } from './legacy-row-packing.js';
import type { BenchIo, BenchSuite, OptionValues } from './suite.js';
import { UsageError, positiveIntOption } from './suite.js';
import { fmtSpread } from './stats.js';
import { markdownTable } from './table.js';

const MB = 1e6;
const MIB = 1024 * 1024;

export type ArtifactPath = 'packed' | 'float';

export interface ArtifactsBenchOptions {
  readonly tokens: number;
  readonly chunkTokens: number;
  readonly stores: readonly ('fs' | 's3')[];
  readonly inFlight: number;
  /** Stores the float (pre-packed) path also runs on. */
  readonly floatStores: readonly ('fs' | 's3')[];
  /** Part size of the S3 store's ranged GETs (the store's default is 8 MiB). */
  readonly s3ReadPartSizeBytes: number;
  /** Ranged GETs of one object in flight (S3). */
  readonly s3ReadParallelism: number;
  /**
   * Rounds of the packed path: every store once per round, each on fresh storage, so the figures
   * come with their spread (the float path, the slow old one kept to compare with, runs in round 1 only).
   */
  readonly repeats: number;
}

export const DEFAULT_ARTIFACTS_BENCH_OPTIONS: ArtifactsBenchOptions = {
  tokens: 1 << 20,
  chunkTokens: 4096,
  stores: ['fs', 's3'],
  inFlight: 4,
  floatStores: ['fs'],
  s3ReadPartSizeBytes: 8 * MIB, // the store's default: a 3.7 MB chunk is one GET, 4 chunks in flight
  s3ReadParallelism: 4,
  repeats: 3,
};

/** The released configuration's artifact layout (config from fixtures/deepseek-v41-flash). */
export async function releasedLayout(): Promise<ArtifactLayout> {
  const json: unknown = JSON.parse(await readFile(join(fixturesRoot(), 'deepseek-v41-flash', 'config.json'), 'utf8'));
  const config = parseModelConfig(json);
  return artifactLayout(config, buildLayerPlan(config), 'bench-released-layout');
}

interface Template {
  /** Packed rows of `entries` entries, as the model emits them. */
  readonly mainU8: Uint8Array;
  readonly indexU8: Uint8Array;
  /** The same rows dequantized (what a float32 Sequence holds). */
  readonly mainF32: Float32Array;
  readonly indexF32: Float32Array;
}

/** Random rows through csa2-core's quantizers: packed bytes and their dequantized values. */
function templateRows(layout: ArtifactLayout, entries: number, seed: number): Template {
  const rng = new SeededRandom(seed);
  const main = Float32Array.from({ length: entries * layout.headDim }, () => rng.nextNormal());
  const index = Float32Array.from({ length: entries * layout.indexHeadDim }, () => rng.nextNormal());
  const mainU8 = quantizeMainKvRows(main, layout.headDim);
  const indexU8 = quantizeIndexKRows(index, layout.indexHeadDim);
  return { mainU8, indexU8, mainF32: dequantizeMainKvRows(mainU8, layout.headDim), indexF32: dequantizeIndexKRows(indexU8, layout.indexHeadDim) };
}

export interface StoreRun {
  readonly store: string;
  /** 1-based round (ArtifactsBenchOptions.repeats). */
  readonly round: number;
  readonly path: ArtifactPath;
  readonly objects: number;
  readonly bytes: number;
  /** Time of the whole write (encoding overlapping the puts) and of its parts, summed over chunks. */
  readonly writeMs: number;
  readonly encodeMs: number;
  readonly putMs: number;
  /** Time of the whole read through the reader (packed) or get + verify + unpack (float). */
  readonly readMs: number;
  /** Second pass, stage by stage: get only, then verify only (and unpack, for the float path). */
  readonly getMs: number;
  readonly verifyMs: number;
  readonly manifestBytes: number;
  /** CPU time (user + system, every thread of this process) of the whole write and of the whole read 1. */
  readonly writeCpuMs: number;
  readonly readCpuMs: number;
}

/** Writes and reads one synthetic document of `tokens` tokens through `store`, on one path. */
export async function runStore(
  name: string,
  store: ObjectStore,
  layout: ArtifactLayout,
  path: ArtifactPath,
  opts: ArtifactsBenchOptions,
  io: BenchIo,
  round = 1,
): Promise<StoreRun> {
  const C = opts.chunkTokens;
  const chunkCount = Math.ceil(opts.tokens / C);
  const templates = [templateRows(layout, C, 1), templateRows(layout, C, 2)];
  const tenant = `bench-${path}`;
  const documentId = 'bench-doc';
  const ids = (c: number): Uint32Array => Uint32Array.from({ length: Math.min(C, opts.tokens - c * C) }, (_, i) => (c * 7919 + i * 31) % 129280);
  const keys: string[] = [];
  let prev: string | null = null;
  for (let c = 0; c < chunkCount; c++) keys.push((prev = chunkKey(layout.modelId, prev, ids(c))));

  let encodeMs = 0;
  let putMs = 0;
  const manifestChunks: ManifestChunk[] = new Array<ManifestChunk>(chunkCount);
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  // As the writer does: contents are made (and, on the float path, packed), encoded into one of
  // `inFlight` reused buffers (header + copy + SHA-256 in slices that let earlier puts' I/O go on), then put.
  const buffers = new BufferPool({ maxFree: opts.inFlight });
  const inFlight = new Set<Promise<void>>();
  for (let c = 0; c < chunkCount; c++) {
    const start = c * C;
    const end = Math.min(opts.tokens, start + C);
    const tpl = templates[c % templates.length] as Template;
    const te = performance.now();
    const sources: ChunkSourceRows[] = layout.kvSources.map((s) => {
      const n = Math.floor(end / s.ratio) - Math.floor(start / s.ratio);
      if (path === 'packed')
        return { layer: s.layer, mainKvU8: tpl.mainU8.subarray(0, n * layout.mainKvRowBytes), indexKU8: tpl.indexU8.subarray(0, n * layout.indexKRowBytes) };
      return {
        layer: s.layer,
        mainKvU8: packMainKvRows(tpl.mainF32.subarray(0, n * layout.headDim), layout.headDim).bytesU8,
        indexKU8: packIndexKRows(tpl.indexF32.subarray(0, n * layout.indexHeadDim), layout.indexHeadDim).bytesU8,
      };
    });
    const buffer = buffers.acquire(chunkObjectBytes(layout, start, end));
    const enc = await encodeChunkAsync(layout, { startToken: start, endToken: end, tokenIds: ids(c), sources }, { into: buffer });
    encodeMs += performance.now() - te;
    manifestChunks[c] = { key: keys[c] as string, startToken: start, endToken: end, sizeBytes: enc.bytesU8.length, sha256: enc.checksumHex };
    const tp = performance.now();
    const p: Promise<void> = store
      .put(chunkObjectKey(tenant, keys[c] as string), enc.bytesU8, { ifAbsent: true })
      .then(() => {
        putMs += performance.now() - tp;
      })
      .finally(() => {
        buffers.release(buffer);
        inFlight.delete(p);
      });
    inFlight.add(p);
    if (inFlight.size >= opts.inFlight) await Promise.race(inFlight);
    if (c % 64 === 63) io.log(`  ${name} (${path}): wrote ${c + 1}/${chunkCount} chunks`);
  }
  await Promise.all(inFlight);
  const manifest: DocumentManifest = {
    formatVersion: MANIFEST_FORMAT_VERSION,
    modelId: layout.modelId,
    layoutId: layout.layoutId,
    tenant,
    documentId,
    tokenCount: opts.tokens,
    chunkTokens: C,
    chunks: manifestChunks,
    createdAt: new Date().toISOString(),
  };
  const manifestBytes = encodeManifest(manifest);
  await store.put(manifestObjectKey(tenant, documentId), manifestBytes);
  const writeMs = performance.now() - t0;
  const writeCpuMs = cpuMs(cpu0);
  const bytes = manifestChunks.reduce((sum, ch) => sum + ch.sizeBytes, 0);

  // Read 1: end to end.
  let readMs: number;
  const cpu1 = process.cpuUsage();
  if (path === 'packed') {
    const reader = new ArtifactReader({ store, layout, maxInFlightGets: opts.inFlight });
    const t1 = performance.now();
    const stats = await reader.visitChunks(await reader.readManifest(tenant, documentId), () => undefined);
    readMs = performance.now() - t1;
    if (stats.tokensLoaded !== opts.tokens) throw new Error(`read back ${stats.tokensLoaded} tokens, wrote ${opts.tokens}`);
  } else {
    const t1 = performance.now();
    await pool(chunkCount, opts.inFlight, async (c) =>
      unpackAll(layout, decodeChunk(layout, keys[c] as string, await store.get(chunkObjectKey(tenant, keys[c] as string)))),
    );
    readMs = performance.now() - t1;
  }
  const readCpuMs = cpuMs(cpu1);
  // Read 2: stage by stage (gets in flight, then verify [+ unpack] one chunk at a time).
  let getMs = 0;
  let verifyMs = 0;
  await pool(chunkCount, opts.inFlight, async (c) => {
    const tg = performance.now();
    const body = await store.get(chunkObjectKey(tenant, keys[c] as string), { sizeBytesHint: manifestChunks[c]?.sizeBytes ?? 0 });
    getMs += performance.now() - tg;
    const tv = performance.now();
    const chunk = decodeChunk(layout, keys[c] as string, body);
    if (path === 'float') unpackAll(layout, chunk);
    verifyMs += performance.now() - tv;
  });
  io.log(`  ${name} (${path}): read back ${chunkCount} chunks`);
  // leave the storage as it was (the next round writes the same keys, and puts with ifAbsent would skip them)
  await pool(chunkCount, opts.inFlight, (c) => store.delete(chunkObjectKey(tenant, keys[c] as string)));
  await store.delete(manifestObjectKey(tenant, documentId));
  return {
    store: name,
    round,
    path,
    objects: chunkCount + 1,
    bytes,
    writeMs,
    encodeMs,
    putMs,
    readMs,
    getMs,
    verifyMs,
    manifestBytes: manifestBytes.length,
    writeCpuMs,
    readCpuMs,
  };
}

function cpuMs(since: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(since);
  return (used.user + used.system) / 1000;
}

function unpackAll(layout: ArtifactLayout, chunk: ReturnType<typeof decodeChunk>): void {
  for (const s of chunk.sources) {
    unpackMainKvRows(s.mainKvU8, layout.headDim);
    unpackIndexKRows(s.indexKU8, layout.indexHeadDim);
  }
}

async function pool(count: number, limit: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, count) }, async () => {
      for (let i = next++; i < count; i = next++) await task(i);
    }),
  );
}

/** Throughput of the two CPU primitives on one chunk's worth of bytes: node's SHA-256, and allocate + copy. */
export interface Primitives {
  readonly chunkBytes: number;
  readonly sha256MBps: number;
  readonly copyMBps: number;
}

export function measurePrimitives(chunkBytes: number): Primitives {
  const src = new Uint8Array(chunkBytes).map((_, i) => (i * 2654435761) >>> 24);
  const rate = (fn: () => void): number => {
    fn(); // warm up
    let n = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < 500) {
      fn();
      n++;
    }
    return (n * chunkBytes) / MB / ((performance.now() - t0) / 1000);
  };
  return {
    chunkBytes,
    sha256MBps: rate(() => void createHash('sha256').update(src).digest()),
    copyMBps: rate(() => void Buffer.allocUnsafeSlow(chunkBytes).set(src)),
  };
}

const rate = (bytes: number, ms: number): number => (ms > 0 ? bytes / MB / (ms / 1000) : 0);
const mbpsText = (x: number): string => (x > 0 ? x.toFixed(0) : '-');

/** The figures of every round of one (store, path): "median (min–max)" when there are several. */
function spread(group: readonly StoreRun[], f: (r: StoreRun) => number): string {
  return fmtSpread(group.map(f), mbpsText);
}

/** The runs grouped by (store, path), in the order they first ran. */
function groupRuns(runs: readonly StoreRun[]): StoreRun[][] {
  const groups = new Map<string, StoreRun[]>();
  for (const r of runs) {
    const k = `${r.store}\0${r.path}`;
    let g = groups.get(k);
    if (g === undefined) groups.set(k, (g = []));
    g.push(r);
  }
  return [...groups.values()];
}

/** The throughput goals for the filesystem store's packed path: ≥ 500 MB/s write, ≥ 1 GB/s read + verify. */
export const ARTIFACT_GOALS = { writeMBps: 500, readMBps: 1000 } as const;

export interface ArtifactGoal {
  readonly goal: string;
  readonly met: boolean | null;
  readonly figure: string;
}

export function artifactGoals(runs: readonly StoreRun[]): ArtifactGoal[] {
  const fs = runs.filter((r) => r.store === 'filesystem' && r.path === 'packed');
  const one = (goal: string, f: (r: StoreRun) => number, min: number): ArtifactGoal => {
    if (fs.length === 0) return { goal, met: null, figure: 'not measured' };
    const values = fs.map(f);
    const ok = values.filter((x) => x >= min).length;
    return { goal, met: ok === values.length, figure: `${fmtSpread(values, mbpsText)} MB/s; ${ok} of ${values.length} rounds` };
  };
  return [
    one(`filesystem write ≥ ${ARTIFACT_GOALS.writeMBps} MB/s`, (r) => rate(r.bytes, r.writeMs), ARTIFACT_GOALS.writeMBps),
    one(`filesystem read + verify ≥ ${ARTIFACT_GOALS.readMBps} MB/s`, (r) => rate(r.bytes, r.readMs), ARTIFACT_GOALS.readMBps),
  ];
}

export function renderArtifactsBench(layout: ArtifactLayout, opts: ArtifactsBenchOptions, runs: readonly StoreRun[], prim: Primitives): string {
  const groups = groupRuns(runs);
  const first = (g: readonly StoreRun[]): StoreRun => g[0] as StoreRun;
  const rows = groups.map((g) => [
    first(g).store,
    first(g).path,
    String(g.length),
    String(first(g).objects),
    (first(g).bytes / MB).toFixed(1),
    spread(g, (r) => rate(r.bytes, r.writeMs)),
    spread(g, (r) => rate(r.bytes, r.writeCpuMs)),
    spread(g, (r) => rate(r.bytes, r.readMs)),
    spread(g, (r) => rate(r.bytes, r.readCpuMs)),
    ((first(g).bytes + first(g).manifestBytes) / opts.tokens).toFixed(2),
  ]);
  const stages = groups.map((g) => [
    first(g).store,
    first(g).path,
    spread(g, (r) => rate(r.bytes, r.encodeMs)),
    spread(g, (r) => rate(r.bytes * opts.inFlight, r.putMs)),
    spread(g, (r) => rate(r.bytes * opts.inFlight, r.getMs)),
    spread(g, (r) => rate(r.bytes, r.verifyMs)),
  ]);
  const goals = artifactGoals(runs);
  const s3 = opts.stores.includes('s3')
    ? `; S3: objects above ${(opts.s3ReadPartSizeBytes / MIB).toFixed(2)} MiB are read as ranged GETs of that size, ${opts.s3ReadParallelism} per object in flight`
    : '';
  return [
    `### Cache artifacts: ${opts.tokens.toLocaleString('en-US')} tokens of the released layout (${bytesPerToken(layout)} B/token of global cache), chunks of ${opts.chunkTokens} tokens, ${opts.inFlight} requests in flight${s3}`,
    '',
    `${opts.repeats} round(s) of the packed path (every store once per round, on fresh storage); the float path ran in round 1 only. Cells: the median over the rounds, the range in brackets.`,
    '',
    markdownTable(
      [
        { header: 'store', align: 'left' },
        { header: 'path', align: 'left' },
        { header: 'rounds' },
        { header: 'objects' },
        { header: 'MB' },
        { header: 'write MB/s (encode+put)' },
        { header: 'write MB per CPU-s' },
        { header: 'read MB/s (get+verify)' },
        { header: 'read MB per CPU-s' },
        { header: 'bytes/token on store' },
      ],
      rows,
    ),
    '',
    '`packed`: rows go in and come out as packed FP4 bytes (encode = header + copy + SHA-256; read = the reader with full verification, rows as views). ' +
      '`float`: the path of a float32 Sequence through the temporary adapter (exact FP4 repacking with scale search on write, unpacking to float32 on read); it was the only path before. ' +
      `Bytes/token on the store include chunk headers, 4-byte token ids, checksums and the manifest; the global cache alone is ${bytesPerToken(layout)}. ` +
      `MB per CPU-s: bytes over the CPU time (user + system, all threads) the step took (the s3 rows include the in-process SDK but not the s3rver process); on a machine shared with other work, the wall rates fall towards it.`,
    '',
    'Goals (filesystem store, packed path):',
    '',
    markdownTable(
      [
        { header: 'goal', align: 'left' },
        { header: 'met', align: 'left' },
        { header: 'figure (median, range over the rounds)', align: 'left' },
      ],
      goals.map((g) => [g.goal, g.met === null ? 'not measured' : g.met ? 'yes' : 'no', g.figure]),
    ),
    '',
    `Where the time goes (one ${(prim.chunkBytes / MB).toFixed(2)} MB chunk at a time, this process): SHA-256 (node crypto) ${prim.sha256MBps.toFixed(0)} MB/s, allocate + copy ${prim.copyMBps.toFixed(0)} MB/s; per stage of each run:`,
    '',
    markdownTable(
      [
        { header: 'store', align: 'left' },
        { header: 'path', align: 'left' },
        { header: 'encode MB/s (pack+copy+SHA)' },
        { header: 'put MB/s per request' },
        { header: 'get MB/s per request' },
        { header: 'verify MB/s (+unpack)' },
      ],
      stages,
    ),
    '',
    `Put and get rates are bytes over the summed time of the requests, ${opts.inFlight} of them overlapping; encode (hashing in slices while the puts' I/O goes on) and the second pass's verify (one chunk at a time, in one piece) run on the main thread. The first table's rates are end to end.`,
  ].join('\n');
}

export async function runArtifactsBench(opts: ArtifactsBenchOptions, io: BenchIo): Promise<string> {
  const layout = await releasedLayout();
  const runs: StoreRun[] = [];
  const paths = (kind: 'fs' | 's3', round: number): ArtifactPath[] => (round === 1 && opts.floatStores.includes(kind) ? ['packed', 'float'] : ['packed']);
  let s3: Awaited<ReturnType<typeof startS3Server>> | null = null;
  try {
    for (let round = 1; round <= opts.repeats; round++) {
      for (const kind of opts.stores) {
        if (kind === 'fs') {
          const dir = mkdtempSync(join(tmpdir(), 'csa2-bench-fs-'));
          try {
            io.log(`artifacts: round ${round}/${opts.repeats}, filesystem store ${dir}`);
            const store = new FsObjectStore(dir);
            for (const path of paths(kind, round)) runs.push(await runStore('filesystem', store, layout, path, opts, io, round));
          } finally {
            rmSync(dir, { recursive: true, force: true });
          }
        } else {
          if (s3 === null) {
            io.log('artifacts: starting s3rver (local S3 server)');
            s3 = await startS3Server();
          }
          io.log(`artifacts: round ${round}/${opts.repeats}, s3rver`);
          const store = new S3ObjectStore({
            bucket: s3.bucket,
            prefix: `bench-${round}`,
            endpoint: s3.endpoint,
            forcePathStyle: true,
            credentials: s3.credentials,
            readPartSizeBytes: opts.s3ReadPartSizeBytes,
            readParallelism: opts.s3ReadParallelism,
          });
          try {
            for (const path of paths(kind, round)) runs.push(await runStore('s3 (s3rver, local)', store, layout, path, opts, io, round));
          } finally {
            await store.close();
          }
        }
      }
    }
  } finally {
    await s3?.stop();
  }
  const chunkBytes = runs[0]?.bytes !== undefined ? Math.round(runs[0].bytes / Math.ceil(opts.tokens / opts.chunkTokens)) : 4 * MIB;
  return renderArtifactsBench(layout, opts, runs, measurePrimitives(chunkBytes));
}

function storeList(values: OptionValues, name: string, fallback: readonly ('fs' | 's3')[]): ('fs' | 's3')[] {
  const v = values[name];
  if (typeof v !== 'string') return [...fallback];
  const list = v === 'none' ? [] : v.split(',');
  for (const s of list) if (s !== 'fs' && s !== 's3') throw new UsageError(`--${name} takes fs and/or s3 (or none), got "${s}"`);
  return list as ('fs' | 's3')[];
}

export function parseArtifactsBenchOptions(values: OptionValues): ArtifactsBenchOptions {
  const d = DEFAULT_ARTIFACTS_BENCH_OPTIONS;
  const int = (name: string, fallback: number): number => positiveIntOption(values, name, fallback);
  const quick = values['quick'] === true;
  return {
    tokens: int('artifact-tokens', quick ? 65536 : d.tokens),
    chunkTokens: int('artifact-chunk-tokens', d.chunkTokens),
    stores: storeList(values, 'stores', d.stores),
    inFlight: int('in-flight', d.inFlight),
    floatStores: storeList(values, 'float-stores', d.floatStores),
    s3ReadPartSizeBytes: int('s3-read-part-bytes', d.s3ReadPartSizeBytes),
    s3ReadParallelism: int('s3-read-parallelism', d.s3ReadParallelism),
    repeats: int('artifact-repeats', quick ? 1 : d.repeats),
  };
}

export const artifactsSuite: BenchSuite = {
  name: 'artifacts',
  summary: 'cache-artifact write/read throughput (filesystem and local S3), packed rows against the float path, and bytes per token on the store',
  options: {
    'artifact-tokens': { type: 'string', description: 'tokens in the synthetic document', defaultText: '1048576 (65536 with --quick)', valueName: 'N' },
    'artifact-chunk-tokens': { type: 'string', description: 'tokens per chunk object', defaultText: '4096', valueName: 'C' },
    stores: { type: 'string', description: 'stores to measure', defaultText: 'fs,s3', valueName: 'fs,s3' },
    'float-stores': { type: 'string', description: 'stores the float (pre-packed) path also runs on', defaultText: 'fs', valueName: 'fs,s3|none' },
    'in-flight': { type: 'string', description: 'puts/gets in flight', defaultText: '4', valueName: 'N' },
    's3-read-part-bytes': {
      type: 'string',
      description: 'part size of the S3 ranged GETs (smaller than a chunk to use them)',
      defaultText: '8388608',
      valueName: 'BYTES',
    },
    's3-read-parallelism': { type: 'string', description: 'ranged GETs of one object in flight', defaultText: '4', valueName: 'N' },
    'artifact-repeats': {
      type: 'string',
      description: 'rounds of the packed path (every store once per round, fresh storage; the float path runs in round 1)',
      defaultText: '3 (1 with --quick)',
      valueName: 'N',
    },
    quick: { type: 'boolean', description: 'small sizes for a smoke run' },
  },
  async run(values, io) {
    io.out(await runArtifactsBench(parseArtifactsBenchOptions(values), io));
  },
};
