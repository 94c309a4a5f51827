/**
 * @module scheduler/generate-work
 * A generation as scheduler work: prepare (a stored document's manifest), load (its chunks into the
 * sequence), prefill phases (exact: every layer over the prompt; CED: encode then decoder replay over
 * the last R rows), then one decode row a step until a stop. Each token goes through the tokenizer's
 * decode stream and the stop-sequence matcher before it is reported.
 *
 * Token i is chosen from the logits after token i-1 (row 0: after the prompt): fed from `forceIds`
 * (teacher forcing) or `resumeTokens` (an earlier attempt's output, not reported again), else
 * sampled. Seeded sampling draws token i's randomness from (seed, i) — see @csa2/core Sampler — so a
 * resumed or batched run samples what an undisturbed run samples.
 */
import { ArtifactReader, type DocumentManifest } from '@csa2/artifacts';
import { Csa2Error, DEFAULT_REPLAY_TOKENS, InputError, Sampler, TokenHistory, tokenLogprobs, validateSampling, type TokenDecodeStream, type Sequence, type Span, type SpanOutput } from '@csa2/core';
import { StopMatcher } from '../stop-matcher.js';
import type { DocumentRef, FinishReason, GenerateHooks, GenerateOutcome, GenerateRequest } from '../types.js';
import { documentCacheKey, type DocumentLease } from './document-cache.js';
import { SegmentRun } from './segment-run.js';
import { listedChunks } from './stored-chunks.js';
import { globalCacheBytes, sequenceBytes, type WorkContext } from './work-context.js';
import type { NextRows, Work } from './work.js';

type Phase =
  | { readonly kind: 'idle' }
  | { readonly kind: 'exact'; readonly run: SegmentRun }
  | { readonly kind: 'encode'; readonly run: SegmentRun }
  | { readonly kind: 'replay'; readonly run: SegmentRun }
  | { readonly kind: 'decode' }
  | { readonly kind: 'done' };

export class GenerateWork implements Work {
  readonly kind = 'generate';
  readonly tenant: string;
  readonly priority: number;
  readonly submittedAtMs = performance.now();
  kvBytes = 0;
  finished = false;

  private seq: Sequence | null = null;
  private phase: Phase = { kind: 'idle' };
  private manifest: DocumentManifest | null = null;
  /** The shared loaded document this generation forks (null: none, or a private copy). */
  private lease: DocumentLease | null = null;
  private readonly replayTokens: number;
  private readonly sampler: Sampler;
  /** The penalties' view of the sequence: the prompt (everything before token 0) and the output. */
  private history: TokenHistory | null = null;
  private readonly stopIds: Set<number>;
  private readonly stops: StopMatcher;
  private readonly decoder: TokenDecodeStream;
  private readonly forced: readonly number[];
  /** Tokens below this index were reported by an earlier attempt. */
  private readonly resumed: number;
  private readonly tokens: number[] = [];
  private readonly logitsRows: Float32Array[] = [];
  private text = '';
  private stoppedByText = false;
  private promptTokens = 0;
  private cachedTokens = 0;
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
    if (req.exact === true && req.document !== undefined) throw new InputError('exact mode runs the whole prompt through every layer; it cannot continue a stored document');
    if (!Number.isInteger(req.maxTokens) || req.maxTokens < 1) throw new InputError(`max tokens must be a positive integer, got ${req.maxTokens}`);
    if (req.forceIds !== undefined && req.forceIds.length < req.maxTokens) {
      throw new InputError(`--force-ids has ${req.forceIds.length} ids, ${req.maxTokens} needed (one per generated token)`);
    }
    this.replayTokens = req.replayTokens ?? DEFAULT_REPLAY_TOKENS;
    if (req.exact !== true && !(Number.isInteger(this.replayTokens) && this.replayTokens >= 1)) throw new InputError(`replay must be a positive integer, got ${this.replayTokens}`);
    if (req.exact !== true && req.document === undefined) void model.decoderStart; // throws for schedules without a split
    validateSampling(req.sampling, Math.min(ctx.tokenizer.vocabSize, model.config.vocabSize));
    if (req.logprobs !== undefined && !(Number.isInteger(req.logprobs) && req.logprobs >= 0 && req.logprobs <= 20)) {
      throw new InputError(`logprobs must be an integer in [0, 20], got ${req.logprobs}`);
    }
    if ((req.n !== undefined && req.n !== 1) || req.promptLogprobs !== undefined || req.seeds !== undefined || req.resumeChoices !== undefined) {
      throw new InputError('n, seeds, resumeChoices and promptLogprobs are being implemented in this engine revision');
    }
    const probe = model.createSequence();
    if (req.promptIds.length > 0) model.checkTokens(req.promptIds, probe, 'prompt');
    const resume = req.resumeTokens ?? [];
    if (req.forceIds !== undefined && resume.length > 0) throw new InputError('resumeTokens and forceIds exclude each other');
    if (resume.length > req.maxTokens) throw new InputError(`${resume.length} resume tokens exceed max tokens ${req.maxTokens}`);
    if (resume.length > 0) model.checkTokens(resume, probe, 'resume tokens');
    this.forced = req.forceIds ?? resume;
    this.resumed = resume.length;
    this.tenant = req.tenant ?? req.document?.tenant ?? 'default';
    this.priority = req.priority ?? 0;
    const tok = ctx.tokenizer;
    this.stopIds = new Set([...(req.stopIds ?? []), ...(req.ignoreEos === true ? [] : tok.eosIds)]);
    this.stops = new StopMatcher(req.stopSequences ?? []);
    this.decoder = tok.createDecodeStream();
    this.sampler = new Sampler(req.sampling, Math.min(tok.vocabSize, model.config.vocabSize));
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
      this.lease = await this.ctx.documents.acquire(documentCacheKey(doc.tenant, doc.documentId, manifest), globalCacheBytes(model, manifest.tokenCount), async () => {
        const seq = model.createSequence();
        seq.reserveTokens(manifest.tokenCount);
        // no chunk cache: the loaded document is the cached copy
        await listedChunks(doc, () => new ArtifactReader({ store, layout }).loadInto(seq, manifest));
        return seq;
      });
      if (this.finished) this.releaseDocument(); // cancelled while it loaded
    }
    this.kvBytes = sequenceBytes(model, total, this.lease !== null ? (this.manifest?.tokenCount ?? 0) : 0);
  }

  async load(): Promise<void> {
    const model = this.ctx.model;
    const total = Math.min(model.config.maxSeqLen, (this.manifest?.tokenCount ?? 0) + this.req.promptIds.length + this.req.maxTokens);
    let seq: Sequence;
    if (this.lease !== null && this.manifest !== null) {
      seq = this.lease.seq.fork();
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
    }
    const prior = seq.length;
    seq.tokens.append(this.req.promptIds);
    this.seq = seq;
    const { hcMult, dim } = model.config;
    const L = model.config.numLayers;
    if (this.req.exact === true) {
      this.phase = { kind: 'exact', run: new SegmentRun(seq, { start: 0, end: seq.length, l0: 0, l1: L, input: null, logits: true }, { hcMult, dim }) };
    } else {
      const start = Math.max(0, prior - Math.max(1, this.replayTokens));
      const run = new SegmentRun(seq, { start, end: seq.length, l0: 0, l1: model.decoderStart, input: null, compressAtEnd: true, keepRows: this.replayTokens }, { hcMult, dim });
      this.phase = { kind: 'encode', run };
    }
  }

  next(): NextRows {
    const p = this.phase;
    switch (p.kind) {
      case 'exact':
      case 'encode':
      case 'replay':
        return { kind: 'prefill', rows: p.run.remaining, layers: p.run.opts.l1 - p.run.opts.l0 };
      case 'decode':
        // paused by its consumer (backpressure): no rows until it resumes
        return this.hooks.flow?.paused === true ? null : { kind: 'decode' };
      case 'idle':
      case 'done':
        return null;
    }
  }

  span(rows: number): Span {
    const p = this.phase;
    const seq = this.requireSeq();
    if (p.kind === 'exact' || p.kind === 'encode' || p.kind === 'replay') return p.run.span(rows);
    if (p.kind !== 'decode') throw new Csa2Error('runtime', `generation ${this.id} has no span to run (${p.kind})`);
    // the token chosen last becomes the next row
    seq.tokens.push(this.tokens[this.tokens.length - 1] as number);
    const pos = seq.length - 1;
    return { seq, layout: { kind: 'step' }, p0: pos, p1: pos + 1, l0: 0, l1: this.ctx.model.config.numLayers, input: null, logits: true };
  }

  took(span: Span, out: SpanOutput): void {
    const p = this.phase;
    const model = this.ctx.model;
    if (p.kind === 'encode') {
      p.run.took(span, out);
      if (p.run.done) {
        const kept = p.run.keptStream();
        const L = model.config.numLayers;
        const run = new SegmentRun(this.requireSeq(), { start: kept.start, end: this.requireSeq().length, l0: model.decoderStart, l1: L, input: kept, logits: true }, model.config);
        this.phase = { kind: 'replay', run };
      }
      return;
    }
    let logits: Float32Array | null;
    if (p.kind === 'exact' || p.kind === 'replay') logits = p.run.took(span, out);
    else logits = out.logits;
    if (logits === null) return;
    if (p.kind !== 'decode') {
      const seq = this.requireSeq();
      this.promptTokens = seq.length;
      // prompt ids never change, so a view stays right even if the buffer is replaced later
      this.history = new TokenHistory(seq.tokens.view(0, seq.length), seq.length);
      this.phase = { kind: 'decode' };
    }
    this.choose(logits);
  }

  /** Chooses token i from its logits, reports it, and decides whether generation goes on. */
  private choose(logits: Float32Array): void {
    const i = this.tokens.length;
    if (this.req.keepLogits === true) this.logitsRows.push(logits.slice());
    const history = this.history as TokenHistory;
    const id = i < this.forced.length ? (this.forced[i] as number) : this.sampler.next(logits, history, i);
    const lp = this.req.logprobs !== undefined && i >= this.resumed ? tokenLogprobs(this.req.sampling, logits, history, this.sampler.vocabLimit, id, this.req.logprobs) : null;
    this.tokens.push(id);
    history.push(id);
    if (i === this.resumed) this.firstTokenAtMs = performance.now();
    const piece = this.stopIds.has(id) ? '' : this.decoder.push(id);
    const { emit, stopped } = this.stops.push(piece);
    if (i >= this.resumed) {
      this.text += emit;
      this.hooks.onToken?.({ choice: 0, index: i, id, text: emit, ...(lp !== null ? { logprob: lp.logprob, topLogprobs: lp.top } : {}) });
    }
    if (stopped) this.stoppedByText = true;
    const seq = this.requireSeq();
    let end: FinishReason | null = null;
    if (this.stoppedByText) end = 'stop';
    else if (this.stopIds.has(id) && this.req.forceIds === undefined) end = 'stop';
    else if (this.cancelled) end = 'cancelled';
    else if (i + 1 >= this.req.maxTokens || seq.length >= this.ctx.model.config.maxSeqLen) end = 'length';
    if (end !== null) this.finish(end);
  }

  private finish(reason: FinishReason): void {
    if (this.finished) return;
    if (reason !== 'cancelled' && !this.stoppedByText) {
      const rest = this.stops.push(this.decoder.flush()).emit + this.stops.flush();
      if (rest.length > 0) {
        this.text += rest;
        this.hooks.onToken?.({ choice: 0, index: this.tokens.length, id: -1, text: rest });
      }
    }
    this.phase = { kind: 'done' };
    this.finished = true;
    const end = performance.now();
    this.settle.resolve({
      tokens: this.tokens,
      text: this.text,
      finishReason: reason,
      choices: [{ tokens: this.tokens, text: this.text, finishReason: reason, logits: this.logitsRows }],
      promptTokens: this.promptTokens || (this.seq?.length ?? 0),
      cachedTokens: this.cachedTokens,
      timings: { prefillMs: (this.firstTokenAtMs || end) - this.submittedAtMs, decodeMs: this.firstTokenAtMs > 0 ? end - this.firstTokenAtMs : 0 },
      logits: this.logitsRows,
    });
    this.seq = null;
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
    this.releaseDocument();
    this.settle.reject(err);
  }

  private requireSeq(): Sequence {
    if (this.seq === null) throw new Csa2Error('runtime', `generation ${this.id} has no sequence`);
    return this.seq;
  }
}
