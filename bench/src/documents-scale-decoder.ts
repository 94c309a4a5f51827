/**
 * @module documents-scale-decoder
 * One decoder run of the documents-scale suite, in a process of its own (a fresh engine, as a decoder
 * worker that has not seen the document; peak RSS of this process only):
 *
 *   node documents-scale-decoder.js JSON     (DecoderRunArgs; prints one JSON line, DecoderRunReport)
 *
 * 1. Engine.open with the warm-up, as a decoder worker opens it (in this thread: the per-layer timer
 *    needs the model; a worker runs the same engine in a worker thread) → `warmRssBytes`;
 * 2. a question on the stored document, one token: TTFT with the document cache cold (manifest, every
 *    chunk fetched and verified, loaded once, then encoder replay + decoder replay);
 * 3. the same question again with the document cache warm: TTFT, then `decodeSteps` decode steps, each
 *    step's time split by layer kind through Csa2Model.timer (LayerTimer);
 * 4. peak RSS (VmHWM, machine.peakRssBytes) after all of it;
 * 5. then, apart, the fetch + verify + load alone: the document read by an ArtifactReader into a new
 *    Sequence, as the document cache loads it.
 * The caller sets the glibc allocator settings the worker images set (WORKER_MALLOC_ENV).
 */
import { pathToFileURL } from 'node:url';
import { DECODE_ATTENTION_ARENA_ROWS, type LayerMode } from '@csa2/core';
import { ArtifactReader, openStore } from '@csa2/artifacts';
import { Engine } from '@csa2/engine';
import { GREEDY } from './documents-bench.js';
import { peakRssBytes } from './machine.js';

export interface DecoderRunArgs {
  readonly modelDir: string;
  readonly storeUrl: string;
  readonly tenant: string;
  readonly documentId: string;
  readonly promptIds: readonly number[];
  readonly replayTokens: number;
  readonly decodeSteps: number;
  /** EngineOptions.scanThreads. @defaultValue 'auto' */
  readonly scanThreads?: number | 'auto';
}

/** Time of one decode step: wall (token to token) and by layer kind, ms. */
export interface StepTimes {
  readonly wallMs: number;
  readonly byKindMs: Readonly<Record<LayerMode, number>>;
  readonly headMs: number;
}

export interface DecoderRunReport {
  readonly documentTokens: number;
  readonly warmUpMs: number;
  readonly warmRssBytes: number;
  readonly peakRssBytes: number;
  /** Time to the first token with the document fetched (fresh engine) and with it in the document cache. */
  readonly ttftFetchedMs: number;
  readonly ttftWarmMs: number;
  /**
   * The fetch + verify + load alone, measured after the questions (and after peak RSS was taken): the
   * manifest and every chunk read and verified by an ArtifactReader into a new Sequence, as the
   * document cache loads it.
   */
  readonly loadMs: number;
  readonly loadedBytes: number;
  /** Both questions chose the same first token (the document cache changes nothing). */
  readonly sameFirstToken: boolean;
  readonly cachedTokens: number;
  readonly steps: readonly StepTimes[];
  /** Layers of each kind in the model (to give per-layer costs). */
  readonly layerCounts: Readonly<Record<LayerMode, number>>;
}

const zero = (): Record<LayerMode, number> => ({ full: 0, reindex: 0, reuse: 0, swa: 0 });

export async function runDecoder(args: DecoderRunArgs): Promise<DecoderRunReport> {
  // as a decoder worker opens it (decoderEngineOptions): decode batches keep the attention arena, the replay runs without
  const engine = await Engine.open({
    modelDir: args.modelDir,
    store: args.storeUrl,
    warmUp: true,
    runtime: { attentionArenaMaxRows: DECODE_ATTENTION_ARENA_ROWS },
    scanThreads: args.scanThreads ?? 'auto',
  });
  try {
    const warmRssBytes = peakRssBytes();
    const document = { tenant: args.tenant, documentId: args.documentId };
    const base = { promptIds: args.promptIds, sampling: GREEDY, ignoreEos: true, replayTokens: args.replayTokens, document } as const;
    const fetched = await engine.generate({ ...base, maxTokens: 1 });

    let byKind = zero();
    let head = 0;
    let last = 0;
    const steps: StepTimes[] = [];
    engine.model.timer = {
      layer: (mode, ms) => void (byKind[mode] += ms),
      other: (what, ms) => void (what === 'head' ? (head += ms) : undefined),
    };
    const warm = await engine.generate(
      { ...base, maxTokens: args.decodeSteps + 1 },
      {
        onToken: (e) => {
          const now = performance.now();
          // token 0 comes from the prefill; token i > 0 from decode step i
          if (e.index > 0) steps.push({ wallMs: now - last, byKindMs: byKind, headMs: head });
          byKind = zero();
          head = 0;
          last = now;
        },
      },
    );
    engine.model.timer = null;
    const peak = peakRssBytes();
    const store = openStore(args.storeUrl);
    let loadMs: number;
    let loadedBytes: number;
    try {
      const t0 = performance.now();
      const reader = new ArtifactReader({ store, layout: engine.layout });
      const manifest = await reader.readManifest(args.tenant, args.documentId);
      const seq = engine.model.createSequence();
      seq.reserveTokens(manifest.tokenCount);
      const stats = await reader.loadInto(seq, manifest);
      loadMs = performance.now() - t0;
      loadedBytes = stats.bytesFetched;
    } finally {
      await store.close();
    }
    return {
      documentTokens: fetched.promptTokens - args.promptIds.length,
      warmUpMs: engine.info().warmUpMs ?? 0,
      warmRssBytes,
      peakRssBytes: peak,
      loadMs,
      loadedBytes,
      ttftFetchedMs: fetched.timings.prefillMs,
      ttftWarmMs: warm.timings.prefillMs,
      sameFirstToken: fetched.tokens[0] === warm.tokens[0],
      cachedTokens: fetched.cachedTokens,
      steps,
      layerCounts: engine.model.plan.counts,
    };
  } finally {
    await engine.close();
  }
}

// Run when executed as a script, not when imported.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const json = process.argv[2];
  if (json === undefined) throw new Error('usage: documents-scale-decoder.js JSON');
  process.stdout.write(`${JSON.stringify(await runDecoder(JSON.parse(json) as DecoderRunArgs))}\n`);
}
