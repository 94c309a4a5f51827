/**
 * @module model/indexer/indexer-job
 * What the indexer's paths share (model/indexer/indexer runs them, model/indexer/indexer-scan and model/indexer/indexer-pool
 * pick): the context of a forward call's indexers, one span's work at a layer, its query rows as graph
 * inputs.
 */
import { Csa2Error } from '../../errors.js';
import type { ModelConfig } from '../../config/model-config.js';
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import type { TensorOf } from '../../runtime/ort-session.js';
import type { TypedGraph } from '../graphs/graph-io.js';
import type { INDEXER_POOL, INDEXER_SCAN } from '../graphs/signatures.js';
import type { IndexScorer } from './indexer-scores.js';
import type { KvSourceCache } from '../sequence/sequence.js';
import type { ForwardObserver, SpanState } from '../sequence/span.js';

/** A layer's indexer: a scan of all visible entries, or of its candidate pool (model/indexer/indexer). */
export type LayerIndexer =
  | { readonly kind: 'scan'; readonly graph: TypedGraph<typeof INDEXER_SCAN>; readonly maskedToCandidates: boolean }
  | { readonly kind: 'pool'; readonly graph: TypedGraph<typeof INDEXER_POOL> }
  /** model/indexer/indexer-scores with the model's IndexScorer: every visible entry, or the candidate pool */
  | { readonly kind: 'split-scan' }
  | { readonly kind: 'split-pool' };

/** The model graphs an indexer run reads (ModelGraphs has them). */
export interface IndexerGraphs {
  /** The split indexer's scorer (its Gemm session and buffers); null with indexerScores 'graph'. */
  readonly indexScorer: IndexScorer | null;
}

export interface IndexerContext {
  readonly config: ModelConfig;
  readonly graphs: IndexerGraphs;
  readonly observer: ForwardObserver | null;
  /**
   * Index keys per scan run (a multiple of the candidate block size): a longer scan unpacks and scores
   * its keys chunk by chunk and merges the chunks' rankings, so its memory does not grow with the
   * context.
   */
  readonly indexerKeyChunk: number;
  /**
   * Upper bound on the scores one graph run holds (rows × index heads × keys): a span with more runs
   * in row blocks (each row's list does not depend on the others); spans whose keys fit share runs.
   */
  readonly indexerBudgetValues: number;
}

/** One span's indexer work at this layer. */
export interface IndexerJob {
  readonly st: SpanState;
  readonly rows: number;
  /** Entries to pick per row: min(topK, call end / ratio). */
  readonly kk: number;
  /** Entries visible to the span's last row (= keys it scans). */
  readonly nVis: number;
  /** Per row, the entries it sees (its causal length). */
  readonly clen: Int32Array;
  /** The KV source whose index keys the span reads. */
  readonly src: KvSourceCache;
  /** The span's rows of the index queries [S, hI, dI] and head weights [S, hI]. */
  readonly iq: Float32Array;
  readonly iw: Float32Array;
}

/** A job's rows [r0, r1) as graph inputs. */
export function queryRows(c: ModelConfig, job: IndexerJob, r0: number, r1: number): { iq: TensorOf<'float32'>; iw: TensorOf<'float32'> } {
  const { indexNumHeads: hI, indexHeadDim: dI } = c;
  return {
    iq: { type: 'float32', data: job.iq.subarray(r0 * hI * dI, r1 * hI * dI), dims: [r1 - r0, hI, dI] },
    iw: { type: 'float32', data: job.iw.subarray(r0 * hI, r1 * hI), dims: [r1 - r0, hI] },
  };
}

export function requireCandidates(cand: Int32Array | null, e: LayerPlanEntry): Int32Array {
  if (cand === null) throw new Csa2Error('runtime', `layer ${e.layer}: no candidate blocks were published`);
  return cand;
}
