/**
 * @module artifacts-bench
 * Cache-artifact throughput (issue "cache artifacts", Measure): a synthetic document of the released
 * layout (4 KV sources, 890 B of global cache per token) written to and read back from the filesystem
 * store and a local S3 server (s3rver), side by side in one run; and the bytes per token on the store,
 * headers, token ids and manifest included.
 *
 * The rows are random FP4 values (valid fake-quantized rows) cycled from a few templates; the token ids
 * differ per chunk, so every chunk is a distinct object. The pipeline is the artifact writer's: pack
 * (exact FP4 repacking with its round-trip check) + SHA-256 + put, 4 puts in flight; reading is get +
 * verify + unpack, 4 gets in flight. Encoding and I/O are timed separately.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  artifactLayout,
  bytesPerToken,
  chunkKey,
  chunkObjectKey,
  decodeChunk,
  encodeChunk,
  encodeManifest,
  manifestObjectKey,
  FsObjectStore,
  S3ObjectStore,
  MANIFEST_FORMAT_VERSION,
  type ArtifactLayout,
  type ChunkSourceRows,
  type ManifestChunk,
  type ObjectStore,
} from '@csa2/artifacts';
import { startS3Server } from '@csa2/artifacts/testing';
import { buildLayerPlan, fakeQuantFp4E4m3Block16, fakeQuantFp4Ue8m0Block32, fixturesRoot, parseModelConfig, SeededRandom } from '@csa2/core';
import type { BenchIo, BenchSuite, OptionValues } from './suite.js';
import { UsageError, positiveIntOption } from './suite.js';
import { markdownTable } from './table.js';

const MIB = 1024 * 1024;

export interface ArtifactsBenchOptions {
  readonly tokens: number;
  readonly chunkTokens: number;
  readonly stores: readonly ('fs' | 's3')[];
  readonly inFlight: number;
}

export const DEFAULT_ARTIFACTS_BENCH_OPTIONS: ArtifactsBenchOptions = { tokens: 1 << 20, chunkTokens: 4096, stores: ['fs', 's3'], inFlight: 4 };

/** The released configuration's artifact layout (config from ../shared/fixtures/deepseek-v41-flash). */
export async function releasedLayout(): Promise<ArtifactLayout> {
  const json: unknown = JSON.parse(await readFile(join(fixturesRoot(), 'deepseek-v41-flash', 'config.json'), 'utf8'));
  const config = parseModelConfig(json);
  return artifactLayout(config, buildLayerPlan(config), 'bench-released-layout');
}

/** Random valid FP4 rows: `entries` main-KV rows and index-K rows, fake-quantized like the model's. */
function templateRows(layout: ArtifactLayout, entries: number, seed: number): { main: Float32Array; index: Float32Array } {
  const rng = new SeededRandom(seed);
  const main = Float32Array.from({ length: entries * layout.headDim }, () => rng.nextNormal());
  const index = Float32Array.from({ length: entries * layout.indexHeadDim }, () => rng.nextNormal());
  return { main: fakeQuantFp4E4m3Block16(main, layout.headDim), index: fakeQuantFp4Ue8m0Block32(index, layout.indexHeadDim) };
}

async function pool<T>(count: number, limit: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, count) }, async () => {
      for (let i = next++; i < count; i = next++) out[i] = await task(i);
    }),
  );
  return out;
}

export interface StoreRun {
  readonly store: string;
  readonly objects: number;
  readonly bytes: number;
  readonly encodeMs: number;
  readonly putMs: number;
  readonly writeMs: number;
  readonly getMs: number;
  readonly decodeMs: number;
  readonly readMs: number;
  readonly manifestBytes: number;
}

/** Writes and reads one synthetic document of `tokens` tokens through `store`. */
export async function runStore(name: string, store: ObjectStore, layout: ArtifactLayout, opts: ArtifactsBenchOptions, io: BenchIo): Promise<StoreRun> {
  const C = opts.chunkTokens;
  const chunkCount = Math.ceil(opts.tokens / C);
  const templates = [templateRows(layout, C, 1), templateRows(layout, C, 2)];
  const tenant = 'bench';
  const keys: string[] = [];
  const ids = (c: number) => Array.from({ length: Math.min(C, opts.tokens - c * C) }, (_, i) => (c * 7919 + i * 31) % 129280);
  let prev: string | null = null;
  for (let c = 0; c < chunkCount; c++) keys.push((prev = chunkKey(layout.modelId, prev, ids(c))));

  let encodeMs = 0;
  let putMs = 0;
  const manifestChunks: ManifestChunk[] = new Array(chunkCount);
  const t0 = performance.now();
  // encoding is synchronous CPU work; puts overlap with the next chunk's encoding (as in the writer)
  const inFlight = new Set<Promise<void>>();
  for (let c = 0; c < chunkCount; c++) {
    const start = c * C;
    const end = Math.min(opts.tokens, start + C);
    const tpl = templates[c % templates.length] as { main: Float32Array; index: Float32Array };
    const sources: ChunkSourceRows[] = layout.kvSources.map((s) => {
      const n = Math.floor(end / s.ratio) - Math.floor(start / s.ratio);
      return { layer: s.layer, mainKvF32: tpl.main.subarray(0, n * layout.headDim), indexKF32: tpl.index.subarray(0, n * layout.indexHeadDim) };
    });
    const te = performance.now();
    const enc = encodeChunk(layout, { startToken: start, endToken: end, tokenIds: ids(c), sources });
    encodeMs += performance.now() - te;
    manifestChunks[c] = { key: keys[c] as string, startToken: start, endToken: end, sizeBytes: enc.bytesU8.length, sha256: enc.checksumHex };
    const tp = performance.now();
    const p: Promise<void> = store.put(chunkObjectKey(tenant, keys[c] as string), enc.bytesU8).then(() => {
      putMs += performance.now() - tp;
      inFlight.delete(p);
    });
    inFlight.add(p);
    if (inFlight.size >= opts.inFlight) await Promise.race(inFlight);
    if (c % 32 === 31) io.log(`  ${name}: wrote ${c + 1}/${chunkCount} chunks`);
  }
  await Promise.all(inFlight);
  const manifest = encodeManifest({
    formatVersion: MANIFEST_FORMAT_VERSION,
    modelId: layout.modelId,
    layoutId: layout.layoutId,
    tenant,
    documentId: 'bench-doc',
    tokenCount: opts.tokens,
    chunkTokens: C,
    chunks: manifestChunks,
    createdAt: new Date().toISOString(),
  });
  await store.put(manifestObjectKey(tenant, 'bench-doc'), manifest);
  const writeMs = performance.now() - t0;

  let getMs = 0;
  let decodeMs = 0;
  let bytes = 0;
  const t1 = performance.now();
  await pool(chunkCount, opts.inFlight, async (c) => {
    const tg = performance.now();
    const body = await store.get(chunkObjectKey(tenant, keys[c] as string));
    getMs += performance.now() - tg;
    const td = performance.now();
    decodeChunk(layout, keys[c] as string, body);
    decodeMs += performance.now() - td;
    bytes += body.length;
  });
  const readMs = performance.now() - t1;
  return { store: name, objects: chunkCount + 1, bytes, encodeMs, putMs, writeMs, getMs, decodeMs, readMs, manifestBytes: manifest.length };
}

export function renderArtifactsBench(layout: ArtifactLayout, opts: ArtifactsBenchOptions, runs: readonly StoreRun[]): string {
  const mbps = (bytes: number, ms: number) => ((bytes / MIB) / (ms / 1000)).toFixed(1);
  const rows = runs.map((r) => [
    r.store,
    String(r.objects),
    (r.bytes / MIB).toFixed(1),
    mbps(r.bytes, r.writeMs),
    mbps(r.bytes, r.encodeMs),
    mbps(r.bytes, r.readMs),
    mbps(r.bytes, r.decodeMs),
    ((r.bytes + r.manifestBytes) / opts.tokens).toFixed(2),
  ]);
  return [
    `### Cache artifacts: ${opts.tokens.toLocaleString('en-US')} tokens of the released layout (${bytesPerToken(layout)} B/token of global cache), chunks of ${opts.chunkTokens} tokens, ${opts.inFlight} requests in flight`,
    '',
    markdownTable(
      [
        { header: 'store', align: 'left' },
        { header: 'objects' },
        { header: 'MiB' },
        { header: 'write MB/s (pack+put)' },
        { header: 'pack only MB/s' },
        { header: 'read MB/s (get+verify+unpack)' },
        { header: 'verify+unpack only MB/s' },
        { header: 'bytes/token on store' },
      ],
      rows,
    ),
    '',
    `bytes/token on store includes the chunk headers, 4-byte token ids, checksums and the manifest; the global cache alone is ${bytesPerToken(layout)}.`,
  ].join('\n');
}

export async function runArtifactsBench(opts: ArtifactsBenchOptions, io: BenchIo): Promise<string> {
  const layout = await releasedLayout();
  const runs: StoreRun[] = [];
  for (const kind of opts.stores) {
    if (kind === 'fs') {
      const dir = mkdtempSync(join(tmpdir(), 'csa2-bench-fs-'));
      try {
        io.log(`artifacts: filesystem store ${dir}`);
        runs.push(await runStore('filesystem', new FsObjectStore(dir), layout, opts, io));
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    } else {
      io.log('artifacts: starting s3rver (local S3 server)');
      const s3 = await startS3Server();
      const store = new S3ObjectStore({ bucket: s3.bucket, prefix: 'bench', endpoint: s3.endpoint, forcePathStyle: true, credentials: s3.credentials });
      try {
        runs.push(await runStore('s3 (s3rver, local)', store, layout, opts, io));
      } finally {
        await store.close();
        await s3.stop();
      }
    }
  }
  return renderArtifactsBench(layout, opts, runs);
}

export function parseArtifactsBenchOptions(values: OptionValues): ArtifactsBenchOptions {
  const int = (name: string, fallback: number): number => positiveIntOption(values, name, fallback);
  const stores = typeof values['stores'] === 'string' ? values['stores'].split(',') : DEFAULT_ARTIFACTS_BENCH_OPTIONS.stores;
  for (const s of stores) if (s !== 'fs' && s !== 's3') throw new UsageError(`--stores takes fs and/or s3, got "${s}"`);
  const quick = values['quick'] === true;
  return {
    tokens: int('artifact-tokens', quick ? 65536 : DEFAULT_ARTIFACTS_BENCH_OPTIONS.tokens),
    chunkTokens: int('artifact-chunk-tokens', DEFAULT_ARTIFACTS_BENCH_OPTIONS.chunkTokens),
    stores: stores as ('fs' | 's3')[],
    inFlight: int('in-flight', DEFAULT_ARTIFACTS_BENCH_OPTIONS.inFlight),
  };
}

export const artifactsSuite: BenchSuite = {
  name: 'artifacts',
  summary: 'cache-artifact write/read throughput (filesystem and local S3) and bytes per token on the store',
  options: {
    'artifact-tokens': { type: 'string', description: 'tokens in the synthetic document', defaultText: '1048576 (65536 with --quick)', valueName: 'N' },
    'artifact-chunk-tokens': { type: 'string', description: 'tokens per chunk object', defaultText: '4096', valueName: 'C' },
    stores: { type: 'string', description: 'stores to measure', defaultText: 'fs,s3', valueName: 'fs,s3' },
    'in-flight': { type: 'string', description: 'puts/gets in flight', defaultText: '4', valueName: 'N' },
    quick: { type: 'boolean', description: 'small sizes for a smoke run' },
  },
  async run(values, io) {
    io.out(await runArtifactsBench(parseArtifactsBenchOptions(values), io));
  },
};
