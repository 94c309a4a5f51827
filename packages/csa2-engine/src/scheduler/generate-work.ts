/**
 * @module scheduler/generate-work
 * A generation as scheduler work: prepare (a stored document's manifest; the document leased from the
 * engine's document cache), load (the sequence: a fork of the cached document, or a private copy),
 * prefill phases (exact: every layer over the prompt; CED: encode then decoder replay over the last R
 * rows), then decode: one row per choice a step until each choice stops. Each token goes through the
 * tokenizer's decode stream and its choice's stop-sequence matcher before it is reported.
 *
 * Token i of a choice is chosen from the logits after its token i-1 (row 0: after the prompt): fed
 * from `forceIds` (teacher forcing) or the resumed tokens (an earlier attempt's output, not reported
 * again), else sampled. Seeded sampling draws token i's randomness from (seed, i) — see @csa2/core
 * Sampler — so a resumed or batched run samples what an undisturbed run samples. With n > 1 choices
 * the prompt is prefilled once and the sequence forked after it (a cached document stays shared,
 * the prompt's rows are frozen and shared too when there is no document); choice i samples with
 * seeds[i] (default seed + i), so choice 0 is exactly the n = 1 generation.
 *
 * Prompt logprobs (echo) come from the logits after every row before each prompt token: the exact
 * run's rows, or (CED) a decoder replay widened to cover the whole prompt. They are computed chunk by
 * chunk as the rows come, so no prompt-length × vocabulary buffer is kept.
 */
import { ArtifactReader, type DocumentManifest } from '@csa2/artifacts';
import {
  Csa2Error,
  type Csa2Model,
  DEFAULT_REPLAY_TOKENS,
  InputError,
  Sampler,
  TokenHistory,
  tokenLogprobs,
  validateSampling,
  type SamplingParams,
  type Sequence,
  type SourceSelections,
  type Span,
  type SpanOutput,
  type TokenDecodeStream,
} from '@csa2/core';
import { StopMatcher } from '../stop-matcher.js';
import type { ChoiceOutcome, DocumentRef, FinishReason, GenerateHooks, GenerateOutcome, GenerateRequest, PromptTokenLogprob } from '../types.js';
import { documentCacheKey, MAX_TAIL_REPLAY, type DocumentLease } from './document-cache.js';
import { SegmentRun } from './segment-run.js';
import { listedChunks } from './stored-chunks.js';
import {
  applyTailState,
  copySelections,
  joinSelections,
  primedTailOf,
  tailCandidatesOf,
  tailShapeOf,
  tailStateBytes,
  tailStateOf,
  type PrimedTail,
} from './stored-tail.js';
import { globalCacheBytes, sequenceBytes, type WorkContext } from './work-context.js';
import type { NextRows, Work } from './work.js';

/** Most choices one generation may have (OpenAI's `n`). */
export const MAX_CHOICES = 16;
/** Most alternatives a logprob may list. */
export const MAX_TOP_LOGPROBS = 20;
/** A decoder-replay chunk takes at least this many rows (SchedulerPolicy.replayChunkBytes). */
const MIN_REPLAY_CHUNK_ROWS = 16;

/** The model's own distribution (prompt logprobs): temperature 1, nothing adjusted. */
const MODEL_DISTRIBUTION: SamplingParams = { temperature: 1, topP: 1, seed: 0 };

type Phase =
  | { readonly kind: 'idle' }
  | { readonly kind: 'exact'; readonly run: SegmentRun }
  | { readonly kind: 'encode'; readonly run: SegmentRun }
  | { readonly kind: 'replay'; readonly run: SegmentRun }
  | { readonly kind: 'decode' }
  | { readonly kind: 'done' };

/** One choice's decoding state. */
class Choice {
  readonly tokens: number[] = [];
  readonly logitsRows: Float32Array[] = [];
  text = '';
  stoppedByText = false;
  end: FinishReason | null = null;
  /** The penalties' view of the sequence: the prompt (everything before token 0) and the output. */
  history: TokenHistory | null = null;
  inFlight = false;

  constructor(
    readonly index: number,
    public seq: Sequence | null,
    readonly sampler: Sampler,
    readonly decoder: TokenDecodeStream,
    readonly stops: StopMatcher,
    /** Tokens fed instead of sampled (teacher forcing, or a resume). */
    readonly forced: readonly number[],
    /** Tokens below this index were reported by an earlier attempt. */
    readonly resumed: number,
  ) {}
}

function checkTop(name: string, v: number | undefined): void {
  if (v !== undefined && !(Number.isInteger(v) && v >= 0 && v <= MAX_TOP_LOGPROBS))
    throw new InputError(`${name} must be an integer in [0, ${MAX_TOP_LOGPROBS}], got ${v}`);
}

export class GenerateWork implements Work {
  readonly kind = 'generate';
  readonly tenant: string;
  readonly priority: number;
  readonly submittedAtMs = performance.now();
  /** Sequences it decodes at once (its choices). */
  readonly sequences: number;
  kvBytes = 0;
  finished = false;

  private seq: Sequence | null = null;
  private phase: Phase = { kind: 'idle' };
  private manifest: DocumentManifest | null = null;
  /** The shared loaded document this generation forks (null: none, or a private copy). */
  private lease: DocumentLease | null = null;
  private readonly replayTokens: number;
  private readonly vocabLimit: number;
  private readonly stopIds: Set<number>;
  private readonly choices: Choice[];
  /** Where the next decode step's rows start among the choices (round-robin when the batch is full). */
  private rr = 0;
  /** Tokens before promptIds (a document's), and the prompt logprobs (promptLogprobs asked). */
  private prior = 0;
  private promptLogprobs: (PromptTokenLogprob | null)[] | null = null;
  /**
   * CED on a cached document whose encoder tail does not depend on the question (tailReusable): the
   * tail this question starts from, or, without one, whether it stores the one it computes.
   */
  private tail: PrimedTail | null = null;
  private storesTail = false;
  /** The tail this question stored, and its decoder replay's candidate-source picks of document rows. */
  private ownTail: PrimedTail | null = null;
  private readonly sourcePieces: SourceSelections[] = [];
  private tailReusable = false;
  /** The document's stored encoder tail (the artifact's) when the document cache did not keep it (off, or no room): this question's own. */
  private loadedTail: PrimedTail | null = null;
  /** Why the stored tail was not used (GenerateOutcome.storedTailRejected). */
  private tailRejection: string | null = null;
  private promptTokens = 0;
  private cachedTokens = 0;
  /** Rows a decoder-replay chunk takes at most (SchedulerPolicy.replayChunkBytes; set when the replay starts). */
  private replayChunk = Infinity;
  private firstTokenAtMs = 0;
  private readonly unfollowFlow: (() => void) | null;

  constructor(
    readonly id: number,
    private readonly ctx: WorkContext,
    private readonly req: GenerateRequest,
    private readonly hooks: GenerateHooks,
    private readonly settle: { resolve(o: GenerateOutcome): void; reject(e: unknown): void },
  ) {
    const model = ctx.model;
    if (req.promptIds.length === 0 && req.document === undefined) throw new InputError('the prompt is empty');
    if (req.exact === true && req.replayTokens !== undefined) throw new InputError('replay and exact exclude each other');
    if (req.exact === true && req.document !== undefined)
      throw new InputError('exact mode runs the whole prompt through every layer; it cannot continue a stored document');
    if (!Number.isInteger(req.maxTokens) || req.maxTokens < 1) throw new InputError(`max tokens must be a positive integer, got ${req.maxTokens}`);
    if (req.forceIds !== undefined && req.forceIds.length < req.maxTokens) {
      throw new InputError(`--force-ids has ${req.forceIds.length} ids, ${req.maxTokens} needed (one per generated token)`);
    }
    this.replayTokens = req.replayTokens ?? DEFAULT_REPLAY_TOKENS;
    if (req.exact !== true && !(Number.isInteger(this.replayTokens) && this.replayTokens >= 1))
      throw new InputError(`replay must be a positive integer, got ${this.replayTokens}`);
    if (req.exact !== true && req.document === undefined) void model.decoderStart; // throws for schedules without a split
    const tok = ctx.tokenizer;
    this.vocabLimit = Math.min(tok.vocabSize, model.config.vocabSize);
    validateSampling(req.sampling, this.vocabLimit);
    checkTop('logprobs', req.logprobs);
    checkTop('prompt logprobs', req.promptLogprobs);
    const n = req.n ?? 1;
    if (!(Number.isInteger(n) && n >= 1 && n <= MAX_CHOICES)) throw new InputError(`n must be an integer in [1, ${MAX_CHOICES}], got ${n}`);
    if (req.seeds !== undefined && req.seeds.length !== n) throw new InputError(`seeds has ${req.seeds.length} entries, n is ${n}`);
    if (req.forceIds !== undefined && n > 1) throw new InputError('forceIds (teacher forcing) needs n = 1');
    if (req.resumeTokens !== undefined && req.resumeChoices !== undefined) throw new InputError('resumeTokens and resumeChoices exclude each other');
    if (n > 1 && (req.resumeTokens?.length ?? 0) > 0) throw new InputError('with n > 1 a generation resumes through resumeChoices (one list per choice)');
    if (req.resumeChoices !== undefined && req.resumeChoices.length !== n)
      throw new InputError(`resumeChoices has ${req.resumeChoices.length} entries, n is ${n}`);
    const resumes = req.resumeChoices ?? [req.resumeTokens ?? []];
    const probe = model.createSequence();
    if (req.promptIds.length > 0) model.checkTokens(req.promptIds, probe, 'prompt');
    for (const [i, resume] of resumes.entries()) {
      if (req.forceIds !== undefined && resume.length > 0) throw new InputError('resumeTokens and forceIds exclude each other');
      if (resume.length > req.maxTokens) throw new InputError(`choice ${i}: ${resume.length} resume tokens exceed max tokens ${req.maxTokens}`);
      if (resume.length > 0) model.checkTokens(resume, probe, `choice ${i} resume tokens`);
    }
    this.tenant = req.tenant ?? req.document?.tenant ?? 'default';
    this.priority = req.priority ?? 0;
    this.sequences = n;
    this.stopIds = new Set([...(req.stopIds ?? []), ...(req.ignoreEos === true ? [] : tok.eosIds)]);
    this.choices = Array.from({ length: n }, (_, i) => {
      const seed = req.seeds?.[i] ?? req.sampling.seed + i;
      const resume = resumes[i] ?? [];
      return new Choice(
        i,
        null,
        new Sampler({ ...req.sampling, seed }, this.vocabLimit),
        tok.createDecodeStream(),
        new StopMatcher(req.stopSequences ?? []),
        req.forceIds ?? resume,
        resume.length,
      );
    });
    // a resumed generation has rows again: let an idle loop look
    this.unfollowFlow = hooks.flow?.onChange((paused) => (paused ? undefined : ctx.wake())) ?? null;
  }

  get cancelled(): boolean {
    return this.hooks.signal?.aborted === true;
  }

  async prepare(): Promise<void> {
    const model = this.ctx.model;
    let contextTokens = this.req.promptIds.length;
    if (this.req.document !== undefined) {
      const reader = new ArtifactReader({ store: this.ctx.requireStore(), layout: this.ctx.layout, cache: this.ctx.cache });
      this.manifest = await reader.readManifest(this.req.document.tenant, this.req.document.documentId);
      contextTokens += this.manifest.tokenCount;
      if (contextTokens > model.config.maxSeqLen) {
        throw new InputError(
          `document ${this.req.document.documentId} (${this.manifest.tokenCount} tokens) plus the prompt (${this.req.promptIds.length}) exceed max_seq_len ${model.config.maxSeqLen}`,
        );
      }
    } else if (contextTokens > model.config.maxSeqLen) {
      throw new InputError(`prompt: ${contextTokens} tokens exceed max_seq_len ${model.config.maxSeqLen}`);
    }
    const total = Math.min(model.config.maxSeqLen, contextTokens + this.req.maxTokens);
    const manifest = this.manifest;
    if (manifest !== null) {
      // the document is loaded once into the engine's document cache and read in place by every
      // question on it; this work's KV budget counts only what it adds (see document-cache)
      const doc = this.req.document as DocumentRef;
      const store = this.ctx.requireStore();
      const layout = this.ctx.layout;
      const documents = this.ctx.documents;
      this.lease = await documents.acquire(documentCacheKey(doc.tenant, doc.documentId, manifest), globalCacheBytes(model, manifest.tokenCount), async () => {
        const seq = documents.loadSequence(model.createSequence());
        try {
          seq.reserveTokens(manifest.tokenCount);
          // no chunk cache: the loaded document is the cached copy
          await listedChunks(doc, () => new ArtifactReader({ store, layout }).loadInto(seq, manifest));
        } catch (err) {
          documents.discard(seq);
          throw err;
        }
        return seq;
      });
      if (this.finished) this.releaseDocument(); // cancelled while it loaded
    }
    // every choice holds at most what one sequence without the shared document holds
    this.kvBytes = this.sequences * sequenceBytes(model, total, this.lease !== null ? (this.manifest?.tokenCount ?? 0) : 0);
    if (manifest !== null && !this.finished) await this.readStoredTail(manifest);
  }

  /** Whether this question's encoder run can start from the document's tail (stored or cached): see encoderTailReusable. */
  private canUseTail(P: number): boolean {
    const R = this.replayTokens;
    return this.req.exact !== true && this.req.promptLogprobs === undefined && R <= MAX_TAIL_REPLAY && encoderTailReusable(this.ctx.model, P, R);
  }

  /**
   * Reads the document's stored encoder tail when the manifest names one for this replay length and the
   * document cache has none: kept in the cache for every later question (or, without room, this one's).
   * The tail is optional: one that is missing or fails its checks is counted and computed as before.
   */
  private async readStoredTail(manifest: DocumentManifest): Promise<void> {
    const t = manifest.tail;
    if (t === undefined || t.replayTokens !== this.replayTokens || this.req.promptIds.length === 0 || !this.canUseTail(manifest.tokenCount)) return;
    if (this.lease !== null && this.lease.tail(this.replayTokens, false) !== null) return;
    const model = this.ctx.model;
    try {
      const reader = new ArtifactReader({ store: this.ctx.requireStore(), layout: this.ctx.layout });
      const stored = await reader.readTail(manifest, tailShapeOf(model), tailCandidatesOf(model));
      const primed = primedTailOf(stored);
      if (this.lease === null) {
        this.loadedTail = primed; // applied to the private copy in load
        return;
      }
      if (!this.lease.storeTail(this.replayTokens, primed, 'stored')) this.loadedTail = primed;
    } catch (err) {
      this.tailRejection = `document ${manifest.documentId}: ${err instanceof Error ? err.message : String(err)}`;
      this.ctx.documents.noteTailRejected(this.tailRejection);
    }
  }

  async load(): Promise<void> {
    const model = this.ctx.model;
    const total = Math.min(model.config.maxSeqLen, (this.manifest?.tokenCount ?? 0) + this.req.promptIds.length + this.req.maxTokens);
    let seq: Sequence;
    const wantPrompt = this.req.promptLogprobs !== undefined;
    if (this.lease !== null && this.manifest !== null) {
      const R = this.replayTokens;
      this.tailReusable = this.canUseTail(this.manifest.tokenCount);
      this.tail = this.tailReusable && this.req.promptIds.length > 0 ? (this.lease.tail(R) ?? this.loadedTail) : null;
      this.storesTail = this.tailReusable && this.tail === null;
      seq = this.lease.seq.fork(total);
      if (this.tail !== null) applyTailState(this.tail.state, seq);
      seq.reserveTokens(total);
      this.cachedTokens = Math.min(this.manifest.tokenCount, (this.req.document as DocumentRef).cachedTokens ?? this.manifest.tokenCount);
    } else {
      seq = model.createSequence();
      seq.reserveTokens(total);
    }
    if (this.lease === null && this.manifest !== null) {
      // a private copy: the document cache is off or full of documents in use
      const reader = new ArtifactReader({ store: this.ctx.requireStore(), layout: this.ctx.layout, cache: this.ctx.cache });
      const manifest = this.manifest;
      const doc = this.req.document as DocumentRef;
      await listedChunks(doc, () => reader.loadInto(seq, manifest));
      this.cachedTokens = Math.min(manifest.tokenCount, doc.cachedTokens ?? manifest.tokenCount);
      if (this.loadedTail !== null) {
        // the stored tail goes straight into the private copy
        this.tailReusable = true;
        this.tail = this.loadedTail;
        applyTailState(this.tail.state, seq);
      }
    }
    const prior = seq.length;
    this.prior = prior;
    seq.tokens.append(this.req.promptIds);
    this.seq = seq;
    if (wantPrompt) this.promptLogprobs = new Array<PromptTokenLogprob | null>(this.req.promptIds.length).fill(null);
    const { hcMult, dim } = model.config;
    const L = model.config.numLayers;
    if (this.req.exact === true) {
      this.phase = {
        kind: 'exact',
        run: new SegmentRun(seq, { start: 0, end: seq.length, l0: 0, l1: L, input: null, logits: true, allLogits: wantPrompt }, { hcMult, dim }),
      };
    } else {
      const start = Math.max(0, prior - Math.max(1, this.replayTokens));
      // prompt logprobs: the replay covers every row before a prompt token (the prompt, and the last document row)
      const keepRows = wantPrompt ? Math.max(this.replayTokens, this.req.promptIds.length + (prior > 0 ? 1 : 0)) : this.replayTokens;
      // a reusable encoder tail: the run keeps the document's last R rows too (the tail's stream) and
      // either starts after them from the stored tail, or stops a chunk at the document's end to store it
      const tailRows = this.tailReusable ? seq.length - start : keepRows;
      const from = this.tail !== null ? { from: prior, keptBefore: this.tail.stream } : this.storesTail ? { breakAt: prior } : {};
      const run = new SegmentRun(
        seq,
        { start, end: seq.length, l0: 0, l1: model.decoderStart, input: null, compressAtEnd: true, keepRows: tailRows, grid: model.encodeGrid, ...from },
        { hcMult, dim },
      );
      this.phase = { kind: 'encode', run };
    }
  }

  next(): NextRows {
    const p = this.phase;
    switch (p.kind) {
      case 'exact':
      case 'encode':
        return { kind: 'prefill', rows: p.run.remaining, layers: p.run.opts.l1 - p.run.opts.l0 };
      case 'replay':
        return { kind: 'prefill', rows: Math.min(p.run.remaining, this.replayChunk), layers: p.run.opts.l1 - p.run.opts.l0 };
      case 'decode': {
        // paused by its consumer (backpressure): no rows until it resumes
        if (this.hooks.flow?.paused === true) return null;
        const rows = this.choices.filter((c) => c.end === null && !c.inFlight).length;
        return rows > 0 ? { kind: 'decode', rows } : null;
      }
      case 'idle':
      case 'done':
        return null;
    }
  }

  span(rows: number): Span {
    const p = this.phase;
    if (p.kind === 'exact' || p.kind === 'encode' || p.kind === 'replay') return p.run.span(rows);
    if (p.kind !== 'decode') throw new Csa2Error('runtime', `generation ${this.id} has no span to run (${p.kind})`);
    // the next choice (round-robin) that runs and has no row in this step yet
    const n = this.choices.length;
    let c: Choice | undefined;
    for (let k = 0; k < n && c === undefined; k++) {
      const cand = this.choices[(this.rr + k) % n] as Choice;
      if (cand.end === null && !cand.inFlight) c = cand;
    }
    if (c === undefined || c.seq === null) throw new Csa2Error('runtime', `generation ${this.id} has no choice to decode`);
    this.rr = (c.index + 1) % n;
    c.inFlight = true;
    // the token chosen last becomes the next row
    const seq = c.seq;
    seq.tokens.push(c.tokens[c.tokens.length - 1] as number);
    const pos = seq.length - 1;
    return { seq, layout: { kind: 'step' }, p0: pos, p1: pos + 1, l0: 0, l1: this.ctx.model.config.numLayers, input: null, logits: true };
  }

  took(span: Span, out: SpanOutput): void {
    const p = this.phase;
    const model = this.ctx.model;
    if (p.kind === 'encode') {
      p.run.took(span, out);
      if (this.storesTail && p.run.next === this.prior) this.storeTail(p.run);
      if (p.run.done) {
        // the decoder replays the last R rows (the kept rows also hold the document's tail when it is reusable)
        const kept = p.run.keptStream(this.tailReusable ? this.replayTokens : undefined);
        const L = model.config.numLayers;
        const wantPrompt = this.promptLogprobs !== null;
        // the candidate source's picks of document rows: from the tail, or kept for it
        const known = this.tail?.sources ?? null;
        const capture = this.ownTail !== null ? (sel: SourceSelections) => this.sourcePieces.push(copySelections(sel, this.prior)) : null;
        const run = new SegmentRun(
          this.requireSeq(),
          {
            start: kept.start,
            end: this.requireSeq().length,
            l0: model.decoderStart,
            l1: L,
            input: kept,
            logits: true,
            allLogits: wantPrompt,
            knownSources: known,
            captureSources: capture,
          },
          model.config,
        );
        this.replayChunk = replayChunkRows(model, run.remaining, this.ctx.replayChunkBytes);
        this.phase = { kind: 'replay', run };
      }
      return;
    }
    if (p.kind === 'exact' || p.kind === 'replay') {
      if (out.rowLogits !== undefined && out.rowLogits !== null) this.takePromptRows(span, out.rowLogits);
      const logits = p.run.took(span, out);
      if (p.kind === 'replay' && p.run.done && this.ownTail !== null) {
        this.ownTail.sources = joinSelections(this.sourcePieces);
        this.ownTail = null;
      }
      if (logits === null) return;
      this.startDecode(logits);
      return;
    }
    if (p.kind !== 'decode' || out.logits === null) return;
    const c = this.choices.find((x) => x.seq === span.seq);
    if (c === undefined) throw new Csa2Error('runtime', `generation ${this.id} got a row of no choice`);
    c.inFlight = false;
    this.choose(c, out.logits);
  }

  /**
   * The encoder has run the document's last R rows: a fork of the sequence as it is now, its token ids
   * cut to the document's, and those rows' output become the document's encoder tail (see PrimedTail).
   */
  private storeTail(run: SegmentRun): void {
    this.storesTail = false;
    const lease = this.lease;
    if (lease === null) return;
    // the sequence holds the question's tokens already: the state is of the document's P
    const state = tailStateOf(this.requireSeq(), this.prior);
    const stream = run.keptCopy(run.opts.start, this.prior);
    const c = this.ctx.model.config;
    const sourceBytes = this.replayTokens * (c.indexTopK + c.candidateTopKBlocks) * 4;
    const tail: PrimedTail = { state, stream, sources: null, bytes: tailStateBytes(state) + stream.X.byteLength + stream.pre.byteLength + sourceBytes };
    if (lease.storeTail(this.replayTokens, tail)) this.ownTail = tail;
  }

  /** Prompt logprobs from the logits after rows [span.p0, span.p1): row r predicts the token at r + 1. */
  private takePromptRows(span: Span, rowLogits: Float32Array): void {
    const lp = this.promptLogprobs;
    if (lp === null) return;
    const seq = this.requireSeq();
    const V = this.ctx.model.config.vocabSize;
    const top = this.req.promptLogprobs ?? 0;
    const none = new TokenHistory([], 0);
    for (let r = span.p0; r < span.p1; r++) {
      const i = r + 1 - this.prior; // the prompt token row r predicts
      if (i < 0 || i >= lp.length) continue;
      const id = seq.tokens.at(r + 1);
      const t = tokenLogprobs(MODEL_DISTRIBUTION, rowLogits.subarray((r - span.p0) * V, (r - span.p0 + 1) * V), none, this.vocabLimit, id, top);
      lp[i] = { id, logprob: t.logprob, topLogprobs: t.top };
    }
  }

  /** The prompt is done: fork a sequence per extra choice, report the prompt logprobs, choose every choice's token 0. */
  private startDecode(logits: Float32Array): void {
    const seq = this.requireSeq();
    this.promptTokens = seq.length;
    const prompt = seq.tokens.view(0, seq.length); // prompt ids never change: the view stays right
    if (this.choices.length > 1) {
      // without a shared document the prompt's rows become a shared prefix (one copy for all choices)
      if (this.lease === null) seq.freeze();
      const total = Math.min(this.ctx.model.config.maxSeqLen, seq.length + this.req.maxTokens);
      for (const c of this.choices.slice(1)) {
        c.seq = seq.fork(total);
        c.seq.reserveTokens(total);
      }
    }
    (this.choices[0] as Choice).seq = seq;
    for (const c of this.choices) c.history = new TokenHistory(prompt, prompt.length);
    if (this.promptLogprobs !== null) this.hooks.onPromptLogprobs?.(this.promptLogprobs);
    this.phase = { kind: 'decode' };
    for (const c of this.choices) if (!this.finished) this.choose(c, logits);
  }

  /** Chooses a choice's token i from its logits, reports it, and decides whether the choice goes on. */
  private choose(c: Choice, logits: Float32Array): void {
    const i = c.tokens.length;
    if (this.req.keepLogits === true) c.logitsRows.push(logits.slice());
    const history = c.history as TokenHistory;
    const id = i < c.forced.length ? (c.forced[i] as number) : c.sampler.next(logits, history, i);
    const lp =
      this.req.logprobs !== undefined && i >= c.resumed ? tokenLogprobs(this.req.sampling, logits, history, this.vocabLimit, id, this.req.logprobs) : null;
    c.tokens.push(id);
    history.push(id);
    if (i === c.resumed && this.firstTokenAtMs === 0) this.firstTokenAtMs = performance.now();
    const piece = this.stopIds.has(id) ? '' : c.decoder.push(id);
    const { emit, stopped } = c.stops.push(piece);
    if (i >= c.resumed) {
      c.text += emit;
      this.hooks.onToken?.({ choice: c.index, index: i, id, text: emit, ...(lp !== null ? { logprob: lp.logprob, topLogprobs: lp.top } : {}) });
    }
    if (stopped) c.stoppedByText = true;
    const seq = c.seq as Sequence;
    let end: FinishReason | null = null;
    if (c.stoppedByText) end = 'stop';
    else if (this.stopIds.has(id) && this.req.forceIds === undefined) end = 'stop';
    else if (this.cancelled) end = 'cancelled';
    else if (i + 1 >= this.req.maxTokens || seq.length >= this.ctx.model.config.maxSeqLen) end = 'length';
    if (end !== null) this.endChoice(c, end);
    if (this.cancelled) this.finish('cancelled');
    else if (this.choices.every((x) => x.end !== null)) this.finish(null);
  }

  private endChoice(c: Choice, reason: FinishReason): void {
    if (c.end !== null) return;
    c.end = reason;
    if (reason !== 'cancelled' && !c.stoppedByText) {
      const rest = c.stops.push(c.decoder.flush()).emit + c.stops.flush();
      if (rest.length > 0) {
        c.text += rest;
        this.hooks.onToken?.({ choice: c.index, index: c.tokens.length, id: -1, text: rest });
      }
    }
    if (c.index > 0) c.seq = null; // choice 0's sequence is the work's
  }

  /** Ends the generation: `reason` for every choice still running (null: they all ended on their own). */
  private finish(reason: FinishReason | null): void {
    if (this.finished) return;
    for (const c of this.choices) if (c.end === null) this.endChoice(c, reason ?? 'cancelled');
    this.phase = { kind: 'done' };
    this.finished = true;
    const end = performance.now();
    const choices: ChoiceOutcome[] = this.choices.map((c) => ({ tokens: c.tokens, text: c.text, finishReason: c.end as FinishReason, logits: c.logitsRows }));
    const first = choices[0] as ChoiceOutcome;
    this.settle.resolve({
      tokens: first.tokens,
      text: first.text,
      finishReason: first.finishReason,
      choices,
      ...(this.promptLogprobs !== null ? { promptLogprobs: this.promptLogprobs } : {}),
      promptTokens: this.promptTokens || (this.seq?.length ?? 0),
      cachedTokens: this.cachedTokens,
      ...(this.tailRejection !== null ? { storedTailRejected: this.tailRejection } : {}),
      timings: { prefillMs: (this.firstTokenAtMs || end) - this.submittedAtMs, decodeMs: this.firstTokenAtMs > 0 ? end - this.firstTokenAtMs : 0 },
      logits: first.logits,
    });
    this.seq = null;
    for (const c of this.choices) c.seq = null;
    this.releaseDocument();
  }

  private releaseDocument(): void {
    this.unfollowFlow?.();
    this.lease?.release();
    this.lease = null;
  }

  cancel(): void {
    this.finish('cancelled');
  }

  fail(err: unknown): void {
    if (this.finished) return;
    this.finished = true;
    this.phase = { kind: 'done' };
    this.seq = null;
    for (const c of this.choices) c.seq = null;
    this.releaseDocument();
    this.settle.reject(err);
  }

  private requireSeq(): Sequence {
    if (this.seq === null) throw new Csa2Error('runtime', `generation ${this.id} has no sequence`);
    return this.seq;
  }
}

/**
 * Whether the encoder's run over a document's last R tokens gives the same state for every question on
 * it: the encode segment is [P - R, P + Q) and its layout depends on its end only through
 * min(end - start, window) window columns and min(top-k, end / ratio) index picks (model/sequence/span), both
 * the same for every end ≥ P once R ≥ the window, P ≥ R and every encoder layer with compressed
 * entries has top-k of them among the document's P tokens.
 */
export function encoderTailReusable(model: Pick<Csa2Model, 'config' | 'plan' | 'decoderStart'>, P: number, R: number): boolean {
  if (!(R >= model.config.windowSize && P >= R)) return false;
  for (const e of model.plan.entries) {
    if (e.layer >= model.decoderStart || e.compressRatio === 0) continue;
    if (Math.floor(P / e.compressRatio) < model.config.indexTopK) return false;
  }
  return true;
}

/**
 * Rows a chunk of a decoder replay of `rows` rows takes: its attention tables (each row's selected
 * entries and window, unpacked to float32, twice: the selections and the key table) within `bytes`, at
 * least MIN_REPLAY_CHUNK_ROWS, the chunks as even as they can be. A 1M* question at tiny width peaked
 * 50 MB higher with its 160 replay rows in one chunk than in chunks of 40 (bench/tools/replay-memory),
 * at the same time to first token; chunking never changes the result.
 */
export function replayChunkRows(model: Pick<Csa2Model, 'config'>, rows: number, bytes: number): number {
  const c = model.config;
  const perRow = (c.indexTopK + c.windowSize) * c.headDim * 4 * 2;
  const cap = Math.max(MIN_REPLAY_CHUNK_ROWS, Math.floor(bytes / perRow));
  return Math.ceil(rows / Math.ceil(rows / cap));
}
