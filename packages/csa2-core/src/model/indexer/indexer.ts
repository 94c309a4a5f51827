/**
 * @module model/indexer/indexer
 * The indexer of an index-source layer for the spans of a forward call (csa2 §3.2–3.3): which
 * compressed entries each row attends to. A span reads the index keys its sequence published last
 * (`seq.indexKSlot`), and its top-k list (and, at the candidate source, its candidate blocks) go into
 * the span's shared slots for the Reuse layers after it.
 *
 * Full layers (and index sources up to the candidate source) scan every visible entry
 * (model/indexer/indexer-scan); layers after the candidate source pick inside each row's candidate pool
 * (model/indexer/indexer-pool). By default both score through model/indexer/indexer-scores (keys unpacked, scores
 * finished and picks made outside onnxruntime, around one Gemm); with indexerScores 'graph' they run
 * the ONNX graphs (the reference, the same lists bit for bit). Several spans share a graph run where that costs little (decode steps): their
 * keys are laid out one after another and each row may only pick its own (a mask), so a row's list is
 * what it would be alone, bit for bit.
 */
import { Csa2Error } from '../../errors.js';
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import type { SourceSelections, SpanState } from '../sequence/span.js';
import { candidateMask, poolTopk, poolTopkSplit } from './indexer-pool.js';
import { candidateBlocksFor, scanChunked, scanGrouped, scanSplit, scanSplitShared, type ScanResult } from './indexer-scan.js';
import type { IndexScorer } from './indexer-scores.js';
import { requireCandidates, type IndexerContext, type IndexerJob, type LayerIndexer } from './indexer-job.js';

/** Rows whose candidate-source picks came from Span.knownSources instead of a scan (tests check that the path ran). */
export const knownSourceStats = { rows: 0 };

/**
 * Runs layer `e`'s indexer for every span of the batch: iq [R, hI, dI] and iw [R, hI] are the batch's
 * attnIn outputs, spans with their row offsets.
 */
export async function runIndexers(
  ctx: IndexerContext,
  indexer: LayerIndexer,
  e: LayerPlanEntry,
  spans: ReadonlyArray<{ readonly st: SpanState; readonly offset: number }>,
  iq: Float32Array,
  iw: Float32Array,
): Promise<void> {
  const c = ctx.config;
  const { indexNumHeads: hI, indexHeadDim: dI } = c;
  const m = e.compressRatio;
  const jobs: IndexerJob[] = [];
  for (const { st, offset } of spans) {
    const { seq, layout, p0, p1 } = st.span;
    const callEnd = layout.kind === 'step' ? p0 + 1 : layout.end;
    const kk = Math.min(c.indexTopK, Math.floor(callEnd / m));
    st.shared.kk = kk;
    if (kk === 0) {
      st.shared.topk = new Int32Array(0);
      continue;
    }
    if (seq.indexKSlot === null) throw new Csa2Error('runtime', `layer ${e.layer}: no index keys were published`);
    const src = seq.cache(seq.indexKSlot);
    const nVis = Math.floor(p1 / m);
    if (src.entries < nVis) throw new Csa2Error('runtime', `layer ${e.layer}: index keys of layer ${src.layer} cover ${src.entries} entries, ${nVis} needed`);
    const S = st.rows;
    jobs.push({
      st,
      rows: S,
      kk,
      nVis,
      clen: Int32Array.from({ length: S }, (_, r) => Math.floor((p0 + r + 1) / m)),
      src,
      iq: iq.subarray(offset * hI * dI, (offset + S) * hI * dI),
      iw: iw.subarray(offset * hI, (offset + S) * hI),
    });
  }
  if (jobs.length === 0) return;

  if (indexer.kind === 'pool' || indexer.kind === 'split-pool') {
    const lists = indexer.kind === 'pool' ? await poolTopk(ctx, indexer.graph, e, jobs) : await poolTopkSplit(ctx, scorerOf(ctx, e), e, jobs);
    jobs.forEach((j, i) => (j.st.shared.topk = lists[i] as Int32Array));
  } else if (indexer.kind === 'split-scan') {
    const scorer = scorerOf(ctx, e);
    const bs = c.candidateBlockSize;
    // rows whose candidate-source picks the span knows take them; the rest of the span is scanned
    const known = new Map<IndexerJob, { a: number; b: number; k: SourceSelections; before: IndexerJob | null; after: IndexerJob | null }>();
    const scanned: IndexerJob[] = [];
    for (const j of jobs) {
      const k = e.isCandidateSource ? (j.st.span.knownSources ?? null) : null;
      const kb = candidateBlocksFor(c, j.nVis);
      const p0 = j.st.span.p0;
      const a = k === null ? 0 : Math.max(0, k.start - p0);
      const b = k === null ? 0 : Math.min(j.rows, k.start + k.rows - p0);
      if (k === null || b <= a || k.kk !== j.kk || k.kb !== kb) {
        scanned.push(j);
        continue;
      }
      const part = (r0: number, r1: number): IndexerJob | null =>
        r1 <= r0
          ? null
          : { ...j, rows: r1 - r0, clen: j.clen.subarray(r0, r1), iq: j.iq.subarray(r0 * hI * dI, r1 * hI * dI), iw: j.iw.subarray(r0 * hI, r1 * hI) };
      const before = part(0, a);
      const after = part(b, j.rows);
      for (const x of [before, after]) if (x !== null) scanned.push(x);
      known.set(j, { a, b, k, before, after });
      knownSourceStats.rows += b - a;
    }
    // spans reading one frozen prefix in full (forks of a document) score it together
    const groups = new Map<Uint8Array, IndexerJob[]>();
    const alone: IndexerJob[] = [];
    for (const j of scanned) {
      const prefix = j.src.indexK.sharedPrefix;
      const split = Math.floor(j.src.indexK.sharedRowCount / bs) * bs;
      if (prefix === null || split === 0 || j.nVis < split) alone.push(j);
      else groups.set(prefix, [...(groups.get(prefix) ?? []), j]);
    }
    const results = new Map<IndexerJob, ScanResult>();
    for (const group of groups.values()) {
      if (group.length === 1) alone.push(group[0] as IndexerJob);
      else (await scanSplitShared(ctx, scorer, e, group)).forEach((r, i) => results.set(group[i] as IndexerJob, r));
    }
    for (const j of alone) results.set(j, await scanSplit(ctx, scorer, e, j));
    for (const [j, { a, b, k, before, after }] of known) {
      const kb = k.kb;
      const topk = new Int32Array(j.rows * j.kk);
      const candidates = new Int32Array(j.rows * kb);
      topk.set(k.topk.subarray((j.st.span.p0 + a - k.start) * j.kk, (j.st.span.p0 + b - k.start) * j.kk), a * j.kk);
      candidates.set(k.candidates.subarray((j.st.span.p0 + a - k.start) * kb, (j.st.span.p0 + b - k.start) * kb), a * kb);
      for (const [x, r0] of [
        [before, 0],
        [after, b],
      ] as const) {
        if (x === null) continue;
        const r = results.get(x) as ScanResult;
        topk.set(r.topk, r0 * j.kk);
        candidates.set(r.candidates as Int32Array, r0 * kb);
      }
      results.set(j, { topk, candidates, kb });
    }
    for (const j of jobs) {
      const r = results.get(j) as ScanResult;
      j.st.shared.topk = r.topk;
      if (e.isCandidateSource) {
        j.st.shared.candidates = r.candidates;
        j.st.shared.kb = r.kb;
      }
    }
  } else if (indexer.maskedToCandidates) {
    // the reference path: each span scans everything, masked to its pool (no grouping: the masks differ)
    for (const j of jobs) {
      const pool = { cand: requireCandidates(j.st.shared.candidates, e), kb: j.st.shared.kb };
      j.st.shared.topk = (await scanChunked(ctx, indexer.graph, e, j, pool)).topk;
    }
  } else {
    // spans whose keys fit one chunk and whose rows fit the budget share runs; longer ones run alone, in chunks
    const small = jobs.filter((j) => j.nVis <= ctx.indexerKeyChunk && j.rows * j.nVis * hI <= ctx.indexerBudgetValues);
    const large = jobs.filter((j) => !small.includes(j));
    const results = new Map<IndexerJob, { topk: Int32Array; candidates: Int32Array | null; kb: number }>();
    for (const [j, r] of await scanGrouped(ctx, indexer.graph, e, small)) results.set(j, r);
    for (const j of large) results.set(j, await scanChunked(ctx, indexer.graph, e, j, null));
    for (const j of jobs) {
      const r = results.get(j) as { topk: Int32Array; candidates: Int32Array | null; kb: number };
      j.st.shared.topk = r.topk;
      if (e.isCandidateSource) {
        j.st.shared.candidates = r.candidates;
        j.st.shared.kb = r.kb;
      }
    }
  }

  if (e.isCandidateSource) {
    for (const j of jobs) {
      const sink = j.st.span.captureSources;
      const { topk, candidates, kb, kk } = j.st.shared;
      if (sink !== undefined && sink !== null && topk !== null && candidates !== null) sink({ start: j.st.span.p0, rows: j.rows, kk, kb, topk, candidates });
    }
  }

  const obs = ctx.observer;
  if (obs !== null) {
    for (const j of jobs) {
      const { p0 } = j.st.span;
      obs.topk?.(e.layer, p0, j.rows, j.kk, j.st.shared.topk as Int32Array);
      if (e.isCandidateSource && j.st.shared.candidates !== null) {
        obs.candidates?.(e.layer, p0, j.rows, j.nVis, candidateMask(j.st.shared.candidates, j.st.shared.kb, c.candidateBlockSize, [0, j.rows], [0, j.nVis]));
      }
    }
  }
}

function scorerOf(ctx: IndexerContext, e: LayerPlanEntry): IndexScorer {
  const s = ctx.graphs.indexScorer;
  if (s === null) throw new Csa2Error('runtime', `layer ${e.layer}: the split indexer has no scorer`);
  return s;
}
