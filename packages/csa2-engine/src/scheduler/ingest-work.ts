/**
 * @module scheduler/ingest-work
 * An ingest as scheduler work: a document (token ids, or text tokenized with the tokenizer's BOS first,
 * as the gateway sends it) encoded into an artifact. Leading chunks that already exist in the tenant's
 * store (an equal prefix ingested before) are loaded instead of encoded, and the encoder then replays
 * the cached tokens its windows depend on (encoderContinuationTokens: 2,540 at the released
 * configuration) with the rest, so that every chunk it writes holds the bytes a straight encode of the
 * same tokens writes: a chunk's bytes are a function of its key, whatever the store held before. Chunks
 * are written as the encode completes them (the writes
 * overlap the next steps), the manifest last. Re-running the same ingest rewrites nothing. A stored
 * chunk that fails verification ends the re-used prefix and is written again (`chunksRepaired`), as
 * is any other stored chunk the writer finds damaged. With `prefix` (a long prompt after a stored
 * document) the document's tokens come first and its chunks are re-used.
 *
 * After the encode, the document's encoder tail is computed once and stored beside the chunks (see
 * stored-tail): on the document as its artifact loads it, the encoder layers over its last R tokens
 * (what every CED question with replay R begins with), then the candidate source over the same rows
 * for their picks; the manifest, written last, names it.
 */
import { ArtifactWriter, DEFAULT_CHUNK_TOKENS, bytesPerToken, encodeManifest, encodeTail, existingChunkPrefix } from '@csa2/artifacts';
import {
  Csa2Error,
  DEFAULT_REPLAY_TOKENS,
  InputError,
  encoderContinuationTokens,
  type Sequence,
  type SourceSelections,
  type Span,
  type SpanOutput,
} from '@csa2/core';
import { MAX_TAIL_REPLAY } from './document-cache.js';
import { encoderTailReusable, replayChunkRows } from './generate-work.js';
import { clearToArtifactState, copySelections, joinSelections, storedTailOf } from './stored-tail.js';
import type { StoredTail } from '@csa2/artifacts';
import type { IngestHooks, IngestOutcome, IngestRequest } from '../types.js';
import { SegmentRun } from './segment-run.js';
import { documentTokens, loadStoredPrefix } from './stored-chunks.js';
import { sequenceBytes, type WorkContext } from './work-context.js';
import type { NextRows, Work } from './work.js';

/** Rows a run of the encoder tail's candidate-source pass takes (see next()). */
const TAIL_SOURCE_CHUNK_ROWS = 16;

export class IngestWork implements Work {
  readonly kind = 'ingest';
  readonly tenant: string;
  readonly priority: number;
  readonly submittedAtMs = performance.now();
  readonly sequences = 1;
  kvBytes = 0;
  finished = false;

  private ids: Uint32Array = new Uint32Array(0);
  private seq: Sequence | null = null;
  private run: SegmentRun | null = null;
  private writer: ArtifactWriter | null = null;
  private pendingWrite: Promise<void> = Promise.resolve();
  private reusedTokens = 0;
  private damagedChunks = 0;
  private readonly chunkTokens: number;
  private readonly tailReplay: number;
  /** The encoder tail's runs (after the encode): the encoder over the last R rows, then the candidate source. */
  private tailPhase: { readonly kind: 'encode' | 'sources'; readonly run: SegmentRun } | null = null;
  private readonly tailPicks: SourceSelections[] = [];
  /** The tail's state, copied once its encoder run is done (the candidate source's run changes the sequence after it). */
  private tailState: StoredTail | null = null;

  constructor(
    readonly id: number,
    private readonly ctx: WorkContext,
    private readonly req: IngestRequest,
    private readonly hooks: IngestHooks,
    private readonly settle: { resolve(o: IngestOutcome): void; reject(e: unknown): void },
  ) {
    ctx.requireStore();
    if ((req.tokenIds === undefined) === (req.text === undefined)) throw new InputError('give the document as exactly one of tokenIds and text');
    this.tenant = req.tenant;
    this.priority = req.priority ?? 0;
    this.chunkTokens = req.chunkTokens ?? ctx.chunkTokens ?? DEFAULT_CHUNK_TOKENS;
    this.tailReplay = req.tailReplayTokens ?? DEFAULT_REPLAY_TOKENS;
    if (!(Number.isInteger(this.tailReplay) && this.tailReplay >= 0 && this.tailReplay <= MAX_TAIL_REPLAY)) {
      throw new InputError(`tail replay tokens must be an integer in [0, ${MAX_TAIL_REPLAY}], got ${this.tailReplay}`);
    }
    void ctx.model.decoderStart; // throws for schedules without an encoder–decoder split
  }

  get cancelled(): boolean {
    return this.hooks.signal?.aborted === true;
  }

  async prepare(): Promise<void> {
    const model = this.ctx.model;
    let own: Uint32Array;
    if (this.req.tokenIds !== undefined) own = Uint32Array.from(this.req.tokenIds);
    else {
      const text = this.ctx.tokenizer.encode(this.req.text as string);
      const bos = this.ctx.tokenizer.bosId;
      own = new Uint32Array(text.length + (bos !== null ? 1 : 0));
      if (bos !== null) own[0] = bos;
      own.set(text, bos !== null ? 1 : 0);
    }
    if (this.req.prefix !== undefined) {
      const prefix = await documentTokens(this.ctx, this.ctx.requireStore(), this.req.prefix);
      this.ids = new Uint32Array(prefix.length + own.length);
      this.ids.set(prefix);
      this.ids.set(own, prefix.length);
    } else this.ids = own;
    if (this.ids.length === 0) throw new InputError(`document ${this.req.documentId} is empty`);
    model.checkTokens(this.ids, model.createSequence(), `document ${this.req.documentId}`);
    this.kvBytes = sequenceBytes(model, this.ids.length);
  }

  async load(): Promise<void> {
    const { model, layout } = this.ctx;
    const store = this.ctx.requireStore();
    const ids = this.ids;
    const C = this.chunkTokens;
    const createdAtMs = this.req.createdAtMs;
    this.writer = new ArtifactWriter({
      store,
      layout,
      tenant: this.req.tenant,
      documentId: this.req.documentId,
      chunkTokens: C,
      // a stored chunk this ingest does not load (past a damaged one, the trailing partial chunk) is
      // downloaded and verified before it counts as written; a corrupt one is replaced
      verifyExisting: 'full',
      ...(createdAtMs !== undefined ? { now: () => new Date(createdAtMs) } : {}),
    });
    // leading chunks that exist already (an equal prefix ingested before) are loaded, not encoded;
    // each is verified, and the first one that fails verification ends the prefix: it is encoded again.
    // Only full chunks count, so a document of exactly one chunk is re-used too, and a shorter one never
    const existing = await existingChunkPrefix(store, layout, this.req.tenant, ids, C);
    const create = () => {
      const s = model.createSequence();
      s.reserveTokens(ids.length);
      return s;
    };
    const { seq, chunks: reusedChunks, damaged } = await loadStoredPrefix(this.ctx, store, this.req.tenant, ids, C, existing, create);
    this.damagedChunks = damaged;
    this.reusedTokens = reusedChunks * C;
    if (reusedChunks > 0) await this.writer.adoptStoredChunks(seq, reusedChunks); // verified by the reader: not packed again
    this.seq = seq;
    this.hooks.onProgress?.({ tokensDone: this.reusedTokens, tokensTotal: ids.length, reusedTokens: this.reusedTokens });
    if (this.reusedTokens >= ids.length) {
      // every chunk is stored: only the encoder tail is computed (the loaded sequence is in its artifact's state already)
      if (!this.startTail(seq)) void this.finishIngest();
      return;
    }
    // the encoder's dependency cone before the first new token: its windows then hold what a straight encode's hold
    const start = Math.max(0, this.reusedTokens - encoderContinuationTokens(model.plan, model.config.windowSize));
    seq.tokens.append(ids.subarray(this.reusedTokens));
    this.run = new SegmentRun(
      seq,
      { start, end: seq.length, l0: 0, l1: model.decoderStart, input: null, compressAtEnd: true, keepRows: 1, grid: model.encodeGrid },
      model.config,
    );
  }

  next(): NextRows {
    if (this.finished) return null;
    const run = this.tailPhase?.run ?? this.run;
    if (run === null || run.done) return null;
    // the tail's runs in chunks within the replay budget, as a question's decoder replay; the candidate
    // source's in the smallest ones (TAIL_SOURCE_CHUNK_ROWS): only its picks are kept, but its attention's
    // tables come with them, and in the 1M-token test they raised the encoder's peak by 6–16 MB at 128 rows a run
    const rows =
      this.tailPhase === null
        ? run.remaining
        : Math.min(
            run.remaining,
            this.tailPhase.kind === 'sources' ? TAIL_SOURCE_CHUNK_ROWS : replayChunkRows(this.ctx.model, this.tailReplay, this.ctx.replayChunkBytes),
          );
    return { kind: 'prefill', rows, layers: run.opts.l1 - run.opts.l0 };
  }

  span(rows: number): Span {
    const run = this.tailPhase?.run ?? this.run;
    if (run === null) throw new Csa2Error('runtime', `ingest ${this.id} has no span to run`);
    return run.span(rows);
  }

  took(span: Span, out: SpanOutput): void {
    if (this.tailPhase !== null) {
      this.tookTail(span, out);
      return;
    }
    const run = this.run;
    const writer = this.writer;
    const seq = this.seq;
    if (run === null || writer === null || seq === null) throw new Csa2Error('runtime', `ingest ${this.id} is not running`);
    run.took(span, out);
    const upto = span.p1;
    // writes go one after another (the writer queues them) while the next steps compute
    this.pendingWrite = writer.writeAvailable(seq, upto);
    this.pendingWrite.catch(() => undefined); // surfaced by finish()
    this.hooks.onProgress?.({ tokensDone: Math.max(this.reusedTokens, upto), tokensTotal: this.ids.length, reusedTokens: this.reusedTokens });
    if (run.done) {
      this.run = null;
      if (!this.startTail(seq)) void this.finishIngest();
    }
  }

  /**
   * Starts the encoder tail's first run when the document has a reusable one (see encoderTailReusable):
   * the finished sequence is put back in its artifact's state (clearToArtifactState: the writer reads
   * only its rows and ids, and no copy of a 1M-token document's ids is made), then the encoder runs over
   * rows [P - R, P) as a question's encode segment begins. False: no tail for this document.
   */
  private startTail(seq: Sequence): boolean {
    const model = this.ctx.model;
    const R = this.tailReplay;
    const P = seq.length;
    if (R === 0 || !encoderTailReusable(model, P, R)) return false;
    clearToArtifactState(seq);
    const run = new SegmentRun(
      seq,
      { start: P - R, end: P, l0: 0, l1: model.decoderStart, input: null, compressAtEnd: true, keepRows: R, grid: model.encodeGrid },
      model.config,
    );
    this.tailPhase = { kind: 'encode', run };
    return true;
  }

  private tookTail(span: Span, out: SpanOutput): void {
    const t = this.tailPhase as { readonly kind: 'encode' | 'sources'; readonly run: SegmentRun };
    const seq = this.seq as Sequence;
    t.run.took(span, out);
    if (!t.run.done) return;
    const model = this.ctx.model;
    if (t.kind === 'encode') {
      const stream = t.run.keptStream();
      this.tailState = storedTailOf(seq, stream, null, this.tailReplay, model, this.ctx.layout);
      const src = model.plan.entries.find((e) => e.isCandidateSource);
      if (src !== undefined && src.layer >= model.decoderStart) {
        // the candidate source's picks of these rows (they depend on the rows' encoder output only); what
        // the decoder layers write into the sequence is no part of the tail (its state is copied above)
        const run = new SegmentRun(
          seq,
          {
            start: stream.start,
            end: seq.length,
            l0: model.decoderStart,
            l1: src.layer + 1,
            input: stream,
            captureSources: (sel) => this.tailPicks.push(copySelections(sel, seq.length)),
          },
          model.config,
        );
        this.tailPhase = { kind: 'sources', run };
        return;
      }
    }
    this.tailPhase = null;
    void this.finishIngest();
  }

  private async finishIngest(): Promise<void> {
    const writer = this.writer;
    const seq = this.seq;
    if (writer === null || seq === null) return;
    this.run = null;
    try {
      await this.pendingWrite.catch(() => undefined);
      const state = this.tailState;
      this.tailState = null;
      const tailBytes = state === null ? null : encodeTail({ ...state, sources: joinSelections(this.tailPicks) });
      const manifest = await writer.finish(seq, tailBytes === null ? {} : { tail: { bytes: tailBytes, replayTokens: this.tailReplay } });
      const stats = writer.stats;
      const artifactBytes = manifest.chunks.reduce((a, c) => a + c.sizeBytes, 0) + encodeManifest(manifest).length;
      this.done();
      this.settle.resolve({
        documentId: this.req.documentId,
        tokens: manifest.tokenCount,
        bytesWritten: stats.bytesWritten,
        artifactBytes,
        tailBytes: manifest.tail?.sizeBytes ?? 0,
        tailReplayTokens: manifest.tail?.replayTokens ?? 0,
        reusedTokens: this.reusedTokens,
        chunksWritten: stats.chunksWritten,
        chunksSkipped: stats.chunksSkipped,
        // (a damaged chunk was deleted before it was written again, so the writer counts it as written)
        chunksRepaired: this.damagedChunks + stats.chunksRepaired,
        bytesPerToken: bytesPerToken(this.ctx.layout),
      });
    } catch (err) {
      this.fail(err);
    }
  }

  private done(): void {
    this.finished = true;
    this.run = null;
    this.tailPhase = null;
    this.tailState = null;
    this.seq = null;
    this.ctx.wake(); // release its KV bytes now, even if nothing else runs
  }

  cancel(): void {
    this.fail(new Csa2Error('runtime', `ingest of ${this.req.documentId} was cancelled`));
  }

  fail(err: unknown): void {
    if (this.finished) return;
    this.done();
    this.settle.reject(err);
  }
}
