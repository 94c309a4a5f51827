/**
 * @module scheduler/stored-tail
 * A document's encoder tail (PrimedTail) as the artifact stores it (@csa2/artifacts
 * format/tail-codec): the ingest computes it once, after the document's chunks (IngestWork), and a
 * question's first load takes it from the store instead of encoding the document's last R tokens
 * (GenerateWork). Either way the state is the same, bit for bit (engine-documents.test).
 *
 * What is stored is how the tail's sequence differs from the document as the artifact loads it
 * (`clearToArtifactState`: token ids and the global caches, no windows, no open groups, no index-K slot): the
 * windows the encoder filled, its open compressor groups and the index-K slot, plus the encoder's
 * output rows and the candidate source's picks of them.
 */
import type { StoredTail, TailShape, TailPending, TailWindow } from '@csa2/artifacts';
import { Csa2Error, type Csa2Model, type Sequence, type SourceSelections, type StreamRows } from '@csa2/core';

/** The model's side of a stored tail's shape (the manifest gives the token count and the replay length). */
export function tailShapeOf(model: Pick<Csa2Model, 'config' | 'plan'>): Omit<TailShape, 'tokenCount' | 'replayTokens' | 'modelId' | 'layoutId'> {
  const c = model.config;
  const ratios = new Map<number, number>();
  for (const e of model.plan.entries) if (e.isKvSource) ratios.set(e.layer, e.compressRatio);
  return { window: c.windowSize, headDim: c.headDim, hcMult: c.hcMult, dim: c.dim, numLayers: c.numLayers, ratios };
}

/** The candidate source's ratio and block size (what its stored picks are checked against); null without one. */
export function tailCandidatesOf(model: Pick<Csa2Model, 'config' | 'plan'>): { sourceRatio: number; blockSize: number } | null {
  const src = model.plan.entries.find((e) => e.isCandidateSource);
  return src === undefined ? null : { sourceRatio: src.compressRatio, blockSize: model.config.candidateBlockSize };
}

/**
 * Puts `seq` back in the state its artifact loads (in place): its token ids and global caches stay; its
 * windows are emptied, its open groups dropped, its index-K slot unset.
 */
export function clearToArtifactState(seq: Sequence): void {
  for (const w of seq.windows) {
    w.rows.fill(0);
    w.positions.fill(-1);
  }
  for (const c of seq.caches.values()) {
    c.pendingGroup = -1;
    c.pendingCount = 0;
    c.pendingKv.fill(0);
    c.pendingScore.fill(0);
  }
  seq.indexKSlot = null;
}

/**
 * The stored form of a tail: `seq` after the encoder over rows [P - R, P) from its artifact's state
 * (clearToArtifactState), its output and picks — copies: `seq` may change afterwards.
 */
export function storedTailOf(
  seq: Sequence,
  stream: StreamRows,
  sources: SourceSelections | null,
  replayTokens: number,
  model: Pick<Csa2Model, 'config'>,
  layout: { readonly modelId: string; readonly layoutId: string },
): StoredTail {
  const c = model.config;
  const P = seq.length;
  if (stream.start !== P - replayTokens || stream.rows !== replayTokens)
    throw new Csa2Error(
      'runtime',
      `an encoder tail of ${replayTokens} rows needs the stream of rows [${P - replayTokens}, ${P}), got [${stream.start}, ${stream.start + stream.rows})`,
    );
  return {
    modelId: layout.modelId,
    layoutId: layout.layoutId,
    replayTokens,
    window: c.windowSize,
    headDim: c.headDim,
    hcMult: c.hcMult,
    dim: c.dim,
    ...tailStateOf(seq), // tokenCount P, the index-K slot, windows, open groups
    streamStart: stream.start,
    streamRows: stream.rows,
    X: stream.X.slice(),
    pre: stream.pre.slice(),
    sources,
  };
}

/**
 * A document's encoder tail for CED questions with replay R: the state after the encoder layers ran
 * over its last R tokens (as the encode run of every question on it begins: rows [P - R, P) of the
 * segment [P - R, P + Q), whose layout does not depend on Q once R ≥ the window and the document holds
 * top-k entries at every ratio), and those rows' output stream (the decoder replay's input). A
 * question forks `seq` and encodes only its own tokens.
 */
export interface PrimedTail {
  /**
   * How the document's sequence differs after the encoder over its last R tokens (TailState
   * below: the encoder layers' windows, open groups, the index-K slot): a question forks the
   * document and applies it, so a tail holds no copy of the document's token ids.
   */
  readonly state: TailState;
  /** The encoder's output for rows [P - R, P). */
  readonly stream: StreamRows;
  /**
   * The candidate source's picks of the document rows the storing question's decoder replay ran (they
   * depend on those rows' encoder output only): later replays take them instead of scanning. Set when
   * that replay completes; null before.
   */
  sources: SourceSelections | null;
  /** Bytes counted for it (its selections included at their most). */
  readonly bytes: number;
}

/** What a document's sequence gains from the encoder over its last R tokens: windows, open groups, the index-K slot (a stored tail's part of it). */
export type TailState = Pick<StoredTail, 'tokenCount' | 'indexKSlot' | 'windows' | 'pending'>;

/** `seq`'s windows that hold rows, its open groups and its index-K slot (copies), as the state of its first `tokenCount` tokens. */
export function tailStateOf(seq: Sequence, tokenCount = seq.length): TailState {
  const windows: TailWindow[] = [];
  seq.windows.forEach((w, layer) => {
    if (w.positions.some((p) => p !== -1)) windows.push({ layer, positions: w.positions.slice(), rows: w.rows.slice() });
  });
  const pending: TailPending[] = [];
  for (const k of seq.caches.values()) {
    if (k.pendingGroup >= 0)
      pending.push({ layer: k.layer, ratio: k.ratio, group: k.pendingGroup, count: k.pendingCount, kv: k.pendingKv.slice(), score: k.pendingScore.slice() });
  }
  return { tokenCount, indexKSlot: seq.indexKSlot, windows, pending };
}

/** Bytes a tail state holds. */
export function tailStateBytes(state: TailState): number {
  let bytes = 0;
  for (const w of state.windows) bytes += w.positions.byteLength + w.rows.byteLength;
  for (const p of state.pending) bytes += p.kv.byteLength + p.score.byteLength;
  return bytes;
}

/**
 * Applies a tail's state to `seq` in place: a document as its artifact loads it (a fork of the cached
 * one, or a private copy), before any other token. The stored tail was checked by the reader against the
 * model's shape and the manifest.
 */
export function applyTailState(state: TailState, seq: Sequence): void {
  if (seq.length !== state.tokenCount) throw new Csa2Error('runtime', `an encoder tail of ${state.tokenCount} tokens does not fit a document of ${seq.length}`);
  if (seq.indexKSlot !== null || seq.windows.some((w) => w.positions.some((p) => p !== -1)) || [...seq.caches.values()].some((k) => k.pendingGroup !== -1)) {
    throw new Csa2Error('runtime', 'an encoder tail applies to a document as its artifact loads it (no windows, no open groups)');
  }
  for (const w of state.windows) {
    const ring = seq.windows[w.layer];
    if (ring === undefined) throw new Csa2Error('runtime', `an encoder tail has a window for layer ${w.layer}`);
    ring.positions.set(w.positions);
    ring.rows.set(w.rows);
  }
  for (const p of state.pending) {
    const k = seq.cache(p.layer);
    k.pendingGroup = p.group;
    k.pendingCount = p.count;
    k.pendingKv.set(p.kv);
    k.pendingScore.set(p.score);
  }
  seq.indexKSlot = state.indexKSlot;
}

/** The PrimedTail of a stored tail (its state, stream and picks; no sequence). */
export function primedTailOf(stored: StoredTail): PrimedTail {
  const state: TailState = { tokenCount: stored.tokenCount, indexKSlot: stored.indexKSlot, windows: stored.windows, pending: stored.pending };
  const stream: StreamRows = { start: stored.streamStart, rows: stored.streamRows, X: stored.X, pre: stored.pre };
  const sources = stored.sources === null ? null : { ...stored.sources };
  const sourceBytes = sources === null ? 0 : sources.topk.byteLength + sources.candidates.byteLength;
  return { state, stream, sources, bytes: tailStateBytes(state) + stored.X.byteLength + stored.pre.byteLength + sourceBytes };
}

/** A copy of the rows of `s` before `end` (none when it starts there or after). */
export function copySelections(s: SourceSelections, end: number): SourceSelections {
  const rows = Math.max(0, Math.min(s.rows, end - s.start));
  return { start: s.start, rows, kk: s.kk, kb: s.kb, topk: s.topk.slice(0, rows * s.kk), candidates: s.candidates.slice(0, rows * s.kb) };
}

/** Consecutive pieces (in row order, one kk and kb) as one; null when there are none or they do not join. */
export function joinSelections(pieces: readonly SourceSelections[]): SourceSelections | null {
  const ps = pieces.filter((p) => p.rows > 0);
  const first = ps[0];
  if (first === undefined) return null;
  let rows = 0;
  for (const p of ps) {
    if (p.start !== first.start + rows || p.kk !== first.kk || p.kb !== first.kb) return null;
    rows += p.rows;
  }
  const topk = new Int32Array(rows * first.kk);
  const candidates = new Int32Array(rows * first.kb);
  let r = 0;
  for (const p of ps) {
    topk.set(p.topk, r * first.kk);
    candidates.set(p.candidates, r * first.kb);
    r += p.rows;
  }
  return { start: first.start, rows, kk: first.kk, kb: first.kb, topk, candidates };
}
