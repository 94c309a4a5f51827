/**
 * @module model/attention/compressor
 * The KV-source compressor (csa2 §3.1): rows feed their layer's groups of m tokens (the open group's
 * fp32 state lives in the sequence's KvSourceCache); every completed group becomes one global-cache
 * entry, whose packed main-KV and index-K rows the compress graph emits (graphs/compress-graph). The
 * groups of every span in a forward call go through one graph run.
 */
import { Csa2Error } from '../../errors.js';
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import { f32, type TensorOf } from '../../runtime/ort-session.js';
import type { TypedGraph } from '../graphs/graph-io.js';
import type { COMPRESS } from '../graphs/signatures.js';
import type { KvSourceCache } from '../sequence/sequence.js';

/** The compressor inputs of one span's rows [p0, p1): latent [S, D] (m = 1) or ckv, cscore [S, D] (m > 1). */
export interface CompressorRows {
  readonly latent?: Float32Array;
  readonly ckv?: Float32Array;
  readonly cscore?: Float32Array;
}

/** The groups one span completes in this call. */
export interface CompletedGroups {
  readonly cache: KvSourceCache;
  /** Group (entry) indices, consecutive from cache.entries. */
  readonly groups: readonly number[];
  /** m = 1: the latent rows [G, D]; m > 1: the groups' kv and score rows [G, m, D]. */
  readonly kv: Float32Array;
  readonly score: Float32Array | null;
}

/**
 * Feeds rows [p0, p1) into the layer's groups; returns the groups they complete (null: none). Rows of
 * groups already cached are skipped (encoder replay re-runs cached tokens: their entries are reused).
 */
export function feedCompressor(cache: KvSourceCache, e: LayerPlanEntry, p0: number, p1: number, rows: CompressorRows): CompletedGroups | null {
  const m = e.compressRatio;
  const D = cache.headDim;
  const firstNew = Math.max(p0, cache.entries * m);
  if (firstNew >= p1) return null;
  if (m === 1) {
    const latent = rows.latent;
    if (latent === undefined) throw new Csa2Error('runtime', `layer ${e.layer}: no compressor latent`);
    const groups = Array.from({ length: p1 - firstNew }, (_, i) => firstNew + i);
    return { cache, groups, kv: latent.subarray((firstNew - p0) * D, (p1 - p0) * D), score: null };
  }
  const { ckv, cscore } = rows;
  if (ckv === undefined || cscore === undefined) throw new Csa2Error('runtime', `layer ${e.layer}: no compressor inputs`);
  const groups: number[] = [];
  const kvParts: Float32Array[] = [];
  const scoreParts: Float32Array[] = [];
  for (let t = firstNew; t < p1; t++) {
    const grp = Math.floor(t / m);
    const slot = t % m;
    if (slot === 0) {
      cache.pendingGroup = grp;
      cache.pendingCount = 0;
    }
    if (cache.pendingGroup !== grp || cache.pendingCount !== slot) {
      throw new Csa2Error('runtime', `layer ${e.layer}: compressor group ${grp} is missing its first ${slot} row(s) (replay must start at a group boundary)`);
    }
    cache.pendingKv.set(ckv.subarray((t - p0) * D, (t - p0 + 1) * D), slot * D);
    cache.pendingScore.set(cscore.subarray((t - p0) * D, (t - p0 + 1) * D), slot * D);
    cache.pendingCount++;
    if (cache.pendingCount === m) {
      groups.push(grp);
      kvParts.push(cache.pendingKv.slice());
      scoreParts.push(cache.pendingScore.slice());
      cache.pendingGroup = -1;
      cache.pendingCount = 0;
    }
  }
  if (groups.length === 0) return null;
  return { cache, groups, kv: concat(kvParts), score: concat(scoreParts) };
}

/**
 * Runs the compress graph once over the completed groups of every span and appends each span's packed
 * rows to its cache. `rope(positions)` gives the compress-table cos/sin rows.
 */
export async function compressGroups(
  graph: TypedGraph<typeof COMPRESS>,
  e: LayerPlanEntry,
  parts: readonly CompletedGroups[],
  rope: (positions: ArrayLike<number>) => { cos: TensorOf<'float32'>; sin: TensorOf<'float32'> },
): Promise<void> {
  if (parts.length === 0) return;
  const m = e.compressRatio;
  for (const p of parts) {
    if (p.groups[0] !== p.cache.entries) throw new Csa2Error('runtime', `layer ${e.layer}: compressed entry ${p.groups[0]} does not follow ${p.cache.entries}`);
  }
  const D = (parts[0] as CompletedGroups).cache.headDim;
  const positions: number[] = [];
  for (const p of parts) for (const j of p.groups) positions.push(j * m);
  const G = positions.length;
  const { cos, sin } = rope(positions);
  const kv = parts.length === 1 ? (parts[0] as CompletedGroups).kv : concat(parts.map((p) => p.kv));
  const out =
    m === 1
      ? await graph.run({ cos, sin, latent: f32(kv, [G, D]) })
      : await graph.run({ cos, sin, gkv: f32(kv, [G, m, D]), gscore: f32(concat(parts.map((p) => p.score as Float32Array)), [G, m, D]) });
  let g0 = 0;
  for (const p of parts) {
    const n = p.groups.length;
    const R = p.cache.mainKv.rowBytes;
    const r = p.cache.indexK.rowBytes;
    p.cache.mainKv.append(out.ckv.data.subarray(g0 * R, (g0 + n) * R));
    p.cache.indexK.append(out.ik.data.subarray(g0 * r, (g0 + n) * r));
    g0 += n;
  }
}

export function concat(parts: readonly Float32Array[]): Float32Array {
  if (parts.length === 1) return parts[0] as Float32Array;
  const n = parts.reduce((s, p) => s + p.length, 0);
  const out = new Float32Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
