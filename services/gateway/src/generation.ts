/**
 * @module generation
 * One completion, from tokenized prompt to answer, shared by /v1/completions and
 * /v1/chat/completions:
 *
 * 1. plan: model check, document readiness, prompt / max_tokens limits, routing, job payloads;
 * 2. enqueue: queue backlog check (429), then the job with its dedup id:
 *    - no document, prompt < CSA2_PREFILL_THRESHOLD_TOKENS → DecodeJob on the decode queue (`decode`);
 *    - a prompt ≥ CSA2_PREFILL_THRESHOLD_TOKENS, after a document or not → PromptPrefillJob on the
 *      prefill queue (`prefill`): the encoder encodes [the document's tokens, re-using its chunks, +]
 *      all but the last prompt token into the artifact `prompt-<requestId>` and enqueues the embedded
 *      DecodeJob (documentId = that artifact, promptIds = the last token); a prefix longer than
 *      MAX_INLINE_TOKEN_IDS travels through the object store (TokenListRef), not the payload;
 *    - a ready document and a shorter prompt → DecodeJob with documentId (`document`);
 * 3. relay: the request's streams (one per choice, `n`) as SSE chunks, or one JSON body when every
 *    choice ended (choice-assembly: texts, echo, logprobs). A client that goes away (request signal /
 *    stream cancel) sets the cancel key; so does a timeout or shutdown.
 *
 * `echo` with logprobs needs the logprobs of every prompt token, which the decoder computes for the
 * prompt tokens it is given (after a document): such a prompt always goes to the decoder itself
 * (never through an encoder, whose decode job holds the last prompt token only), so it can have at
 * most MAX_INLINE_TOKEN_IDS (4,096) tokens.
 */
import { randomBytes, randomInt } from 'node:crypto';
import type { Context } from 'hono';
import { putTokenList } from '@csa2/artifacts';
import {
  DECODE_JOB_NAME,
  DECODE_QUEUE,
  DEFAULT_DECODE_JOB_OPTIONS,
  DEFAULT_PREFILL_JOB_OPTIONS,
  MAX_INLINE_TOKEN_IDS,
  PREFILL_JOB_NAME,
  PREFILL_QUEUE,
  decodeCostTokens,
  MIN_FAIR_WEIGHT,
  fairFlow,
  fairPriority,
  parseDecodeJob,
  parsePrefillJob,
  promptDocumentId,
  requestDecodeJobId,
  requestPrefillJobId,
  type DecodeJob,
  type JobSampling,
  type PrefillJob,
  type StreamEntry,
} from '@csa2/jobs';
import { ApiError, invalidRequest, isRedisUnavailable, modelNotFound, redisUnavailable, toApiError, waiting, workerError } from './errors.js';
import { STORAGE_FAILURE_CODES, documentStatus, markDocumentDamaged, type DocumentDeps } from './documents.js';
import type { GatewayDeps } from './capabilities.js';
import type { AbortReason } from './inflight.js';
import type { Endpoint, GenerationRoute } from './metrics.js';
import { completionBody, finishChunk, roleChunk, textChunk, usageChunk, type ResponseMeta } from './openai/format.js';
import type { FinishReason, OpenAiUsage } from './openai/usage.js';
import { ChoiceAssembly, type AssembledChoice, type ChoiceDelta, type EchoSpec } from './choice-assembly.js';
import { deletePromptArtifact, isPromptArtifactId, type PromptArtifactDeps } from './prompt-artifacts.js';
import { progressComment, relayStream, type RelayDeps, type RelayProgress } from './relay.js';
import type { Admission } from './key-limiter.js';

/** The admission of a request under no limits. */
const NO_LIMITS: Admission = { headers: {}, release: () => undefined };
import { createSseWriter } from './sse.js';

/** The capabilities this module takes. */
export type GenerationDeps = Pick<
  GatewayDeps,
  'cancellations' | 'config' | 'inflight' | 'limits' | 'logger' | 'metrics' | 'model' | 'queues' | 'redis' | 'store' | 'tokenizer'
> &
  DocumentDeps &
  RelayDeps &
  PromptArtifactDeps;

/** The sampling fields beyond temperature, top_p and seed (absent = off). */
export type SamplingOptions = Omit<JobSampling, 'temperature' | 'topP' | 'seed'>;

/** What a route hands over after parsing and tokenizing. */
export interface GenerationRequest {
  /** The x-request-id of the HTTP request (carried into the jobs, so worker logs name it). */
  readonly reqId?: string;
  readonly endpoint: Endpoint;
  readonly tenant: string;
  readonly model: string;
  /** Prompt tokens after the document (the whole prompt without one). */
  readonly promptIds: readonly number[];
  /** Where the prompt came from, for error params: 'prompt' or 'messages'. */
  readonly promptParam: string;
  readonly documentId: string | null;
  readonly maxTokens: number | null;
  /** 'max_tokens' or 'max_completion_tokens', for error params. */
  readonly maxTokensParam: string;
  readonly temperature: number;
  readonly topP: number;
  readonly seed: number | null;
  /** top_k, min_p, the penalties and logit_bias as @csa2/core SamplingParams names them; only the ones the request set. */
  readonly samplingOptions: SamplingOptions;
  readonly stop: readonly string[];
  readonly ignoreEos: boolean;
  readonly stream: boolean;
  readonly includeUsage: boolean;
  /** Choices from one prefill (OpenAI `n`), choice i sampling with seed + i. */
  readonly n: number;
  /** Each generated token's logprob with this many alternatives (completions `logprobs`, chat `top_logprobs`); null: none. */
  readonly logprobs: number | null;
  /** completions `echo`: the prompt is answered before each choice's text (with its logprobs when `logprobs` is set). */
  readonly echo: EchoSpec | null;
  /** The request id to use (batch lines derive theirs); a fresh one when absent. */
  readonly requestId?: string;
  /** The key's fair-share weight (its jobs' priorities, fair-priority). @defaultValue 1 */
  readonly weight?: number;
}

export interface GenerationPlan {
  readonly request: GenerationRequest;
  readonly requestId: string;
  readonly route: GenerationRoute;
  readonly acceptedAtMs: number;
  /** Document tokens + prompt tokens. */
  readonly promptTokens: number;
  /** Tokens the artifact of a named document holds (0 without one). */
  readonly documentTokens: number;
  /** The createdAt of the named document's manifest (null without one): names it when a reader finds it damaged. */
  readonly documentCreatedAt: string | null;
  readonly decodeJob: DecodeJob;
  /**
   * The prefill route: the tokens the encoder encodes into the request's prompt artifact (after the
   * named document's, if any); its PromptPrefillJob is built at enqueue, once a long list is stored.
   */
  readonly prefillPrefix: readonly number[] | null;
}

/** Backlog states: accepted, not yet running. */
const BACKLOG_STATES = ['wait', 'prioritized', 'delayed'] as const;

function newRequestId(endpoint: Endpoint): string {
  return `${endpoint === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomBytes(18).toString('base64url')}`;
}

/** Validates a request against the model and limits and builds its jobs (nothing is enqueued yet). */
export async function planGeneration(deps: GenerationDeps, request: GenerationRequest): Promise<GenerationPlan> {
  const { limits } = deps;
  if (request.model !== deps.model.name) throw modelNotFound(request.model, deps.model.name);
  if (request.documentId !== null && isPromptArtifactId(request.documentId)) {
    // a long prompt's artifact serves its own request only: never a document to the tenant
    throw new ApiError(404, `No document found with id '${request.documentId}'`, { param: 'document_id', code: 'document_not_found' });
  }
  if (request.promptIds.length === 0)
    throw invalidRequest(`Invalid value for '${request.promptParam}': the prompt is empty`, request.promptParam, 'invalid_value');
  checkChoices(request, limits.maxChoices);
  const maxTokensParam = request.maxTokensParam;
  if (request.maxTokens !== null) {
    // max_tokens 0 answers the prompt only: meaningful with echo (scoring a text with its logprobs)
    if (request.maxTokens < (request.echo !== null ? 0 : 1)) {
      const why = request.echo !== null ? 'must be at least 0' : "must be at least 1 (0 only with 'echo')";
      throw invalidRequest(`Invalid value for '${maxTokensParam}': ${why}, got ${request.maxTokens}`, maxTokensParam, 'invalid_value');
    }
    if (request.maxTokens > limits.maxTokens) {
      throw invalidRequest(
        `Invalid value for '${maxTokensParam}': ${request.maxTokens} is more than this server allows (${limits.maxTokens})`,
        maxTokensParam,
        'invalid_value',
      );
    }
  }

  let documentTokens = 0;
  let documentCreatedAt: string | null = null;
  if (request.documentId !== null) {
    const doc = await documentStatus(deps, request.tenant, request.documentId);
    if (doc === null) throw new ApiError(404, `No document found with id '${request.documentId}'`, { param: 'document_id', code: 'document_not_found' });
    if (doc.state.status === 'failed' && STORAGE_FAILURE_CODES.has(doc.state.code)) {
      // the artifact is damaged: the server lost data, the request is fine (5xx, not 409)
      throw workerError(doc.state.code, `Document '${request.documentId}' cannot be read: ${doc.state.reason}`);
    }
    if (doc.state.status !== 'ready') {
      const why =
        doc.state.status === 'failed' ? `its encoding failed (${doc.state.code.replaceAll('-', '_')}): ${doc.state.reason}` : `it is ${doc.state.status}.`;
      throw new ApiError(409, `Document '${request.documentId}' is not ready: ${why}`, { param: 'document_id', code: 'document_not_ready' });
    }
    documentTokens = doc.state.tokens;
    documentCreatedAt = doc.state.manifest.createdAt;
  }
  const promptTokens = documentTokens + request.promptIds.length;
  if (promptTokens > limits.maxPromptTokens) {
    const fromDoc = documentTokens > 0 ? ` (${documentTokens} from document '${request.documentId ?? ''}')` : '';
    throw invalidRequest(
      `This model's maximum prompt length is ${limits.maxPromptTokens} tokens. However, your prompt has ${promptTokens} tokens${fromDoc}. Please reduce the length of the prompt.`,
      request.promptParam,
      'context_length_exceeded',
    );
  }
  let maxTokens: number;
  if (request.maxTokens === null) {
    maxTokens = Math.min(limits.defaultMaxTokens, limits.contextTokens - promptTokens);
  } else {
    maxTokens = request.maxTokens;
    if (promptTokens + maxTokens > limits.contextTokens) {
      throw invalidRequest(
        `This model's maximum context length is ${limits.contextTokens} tokens. However, you requested ${promptTokens + maxTokens} tokens (${promptTokens} in the prompt, ${maxTokens} in the completion). Please reduce the prompt or the completion length.`,
        maxTokensParam,
        'context_length_exceeded',
      );
    }
  }

  const requestId = request.requestId ?? newRequestId(request.endpoint);
  const acceptedAtMs = Date.now();
  // the prompt's logprobs (echo) are computed by the decoder over the prompt it is given: all of it
  const promptLogprobs = request.echo !== null && request.logprobs !== null;
  if (promptLogprobs && request.promptIds.length > MAX_INLINE_TOKEN_IDS) {
    throw invalidRequest(
      `Invalid value for 'echo': with 'logprobs' the prompt (after any document) may have at most ${MAX_INLINE_TOKEN_IDS} tokens on this server, got ${request.promptIds.length}.`,
      'echo',
      'invalid_value',
    );
  }
  // a long prompt goes through an encoder, also after a document (the decoder gets short prompts only)
  const long = request.promptIds.length >= limits.prefillThresholdTokens && !promptLogprobs;
  const route: GenerationRoute = long ? 'prefill' : request.documentId !== null ? 'document' : 'decode';
  const ids = [...request.promptIds];
  const reqId = request.reqId !== undefined ? { reqId: request.reqId } : {};
  const decodeJob = parseDecodeJob({
    v: 1,
    requestId,
    ...reqId,
    tenant: request.tenant,
    model: deps.model.name,
    promptIds: route === 'prefill' ? ids.slice(-1) : ids,
    documentId: route === 'prefill' ? promptDocumentId(requestId) : request.documentId,
    sampling: { temperature: request.temperature, topP: request.topP, seed: request.seed ?? randomInt(0, 2 ** 31), ...request.samplingOptions },
    maxTokens,
    stop: [...request.stop],
    ignoreEos: request.ignoreEos,
    replayTokens: null,
    acceptedAtMs,
    ...(request.n > 1 ? { n: request.n } : {}),
    ...(request.logprobs !== null && maxTokens > 0 ? { logprobs: request.logprobs } : {}),
    ...(promptLogprobs && request.logprobs !== null ? { promptLogprobs: request.logprobs } : {}),
  } satisfies DecodeJob);
  const prefillPrefix = route === 'prefill' ? ids.slice(0, -1) : null;
  return { request, requestId, route, acceptedAtMs, promptTokens, documentTokens, documentCreatedAt, decodeJob, prefillPrefix };
}

/** n within [1, CSA2_MAX_CHOICES]; the last choice's seed (seed + n - 1) a safe integer. */
function checkChoices(request: GenerationRequest, maxChoices: number): void {
  if (!Number.isInteger(request.n) || request.n < 1 || request.n > maxChoices) {
    throw invalidRequest(`Invalid value for 'n': this server generates at most ${maxChoices} choices per request, got ${request.n}.`, 'n', 'invalid_value');
  }
  if (request.seed !== null && request.seed > Number.MAX_SAFE_INTEGER - (request.n - 1)) {
    throw invalidRequest(
      `Invalid value for 'seed': choice i samples with seed + i, so with n = ${request.n} the seed must be at most ${Number.MAX_SAFE_INTEGER - (request.n - 1)}.`,
      'seed',
      'invalid_value',
    );
  }
}

/** Tokens a plan may cost (per-key tokens per minute): its prompt once, plus max_tokens for each choice. */
export function plannedTokens(plan: GenerationPlan): number {
  return plan.promptTokens + (plan.decodeJob.n ?? 1) * plan.decodeJob.maxTokens;
}

/**
 * The PromptPrefillJob of a prefill-route plan: a prefix longer than MAX_INLINE_TOKEN_IDS is stored
 * in the object store first (the encoder reads it back and deletes it), so no payload carries it.
 * `share`: the fair-share flow the decode job the encoder adds goes to.
 */
async function promptPrefillJob(
  deps: GenerationDeps,
  plan: GenerationPlan,
  prefix: readonly number[],
  share: { readonly weight?: number; readonly batch: boolean },
): Promise<PrefillJob> {
  const { request, requestId } = plan;
  const tokens =
    prefix.length > MAX_INLINE_TOKEN_IDS
      ? { tokensRef: await putTokenList(deps.store, request.tenant, requestPrefillJobId(requestId), prefix) }
      : { tokenIds: [...prefix] };
  return parsePrefillJob({
    v: 1,
    kind: 'prompt',
    ...(request.reqId !== undefined ? { reqId: request.reqId } : {}),
    tenant: request.tenant,
    requestId,
    model: deps.model.name,
    ...tokens,
    prefixDocumentId: request.documentId,
    decode: plan.decodeJob,
    ...(share.weight !== undefined ? { weight: share.weight } : {}),
    ...(share.batch ? { batch: true } : {}),
    acceptedAtMs: plan.acceptedAtMs,
  } satisfies PrefillJob);
}

export interface EnqueueOptions {
  /**
   * A batch line: its jobs go to the tenant's batch flow with this weight relative to the key's
   * (CSA2_BATCH_WEIGHT), so they fill what interactive requests leave.
   */
  readonly batchWeight?: number;
}

/** Refuses with 429 when the queue's backlog reached CSA2_MAX_QUEUE_DEPTH, else adds the plan's first job. */
export async function enqueueGeneration(deps: GenerationDeps, plan: GenerationPlan, options: EnqueueOptions = {}): Promise<void> {
  if (!deps.inflight.isAccepting) throw new ApiError(503, 'the server is shutting down', { code: 'shutting_down', headers: { 'retry-after': '1' } });
  const prefix = plan.prefillPrefix;
  const queue = prefix !== null ? deps.queues.prefill : deps.queues.decode;
  try {
    const counts = await queue.getJobCounts(...BACKLOG_STATES);
    const backlog = Object.values(counts).reduce((a, b) => a + b, 0);
    if (backlog >= deps.limits.maxQueueDepth) {
      throw new ApiError(
        429,
        `The server is overloaded: ${waiting(backlog, 'request')} for the ${prefix !== null ? 'prefill' : 'decode'} workers. Please retry shortly.`,
        {
          code: 'queue_full',
          headers: { 'retry-after': '1' },
        },
      );
    }
    // fair shares between tenants, and between a tenant's interactive requests and its batch lines:
    // the job's priority is its start tag in its flow (fair-priority)
    const batch = options.batchWeight !== undefined;
    const weight = batch ? Math.max(MIN_FAIR_WEIGHT, (plan.request.weight ?? 1) * (options.batchWeight as number)) : plan.request.weight;
    const share = { tenant: fairFlow(plan.request.tenant, batch), ...(weight !== undefined ? { weight } : {}) };
    if (prefix !== null) {
      const job = await promptPrefillJob(deps, plan, prefix, { ...(weight !== undefined ? { weight } : {}), batch });
      const priority = await fairPriority(deps.redis, PREFILL_QUEUE, { ...share, costTokens: prefix.length });
      await deps.queues.prefill.add(PREFILL_JOB_NAME, job, { ...DEFAULT_PREFILL_JOB_OPTIONS, jobId: requestPrefillJobId(plan.requestId), priority });
      deps.metrics.prefillTokens.inc({ kind: 'prompt' }, prefix.length);
    } else {
      const priority = await fairPriority(deps.redis, DECODE_QUEUE, { ...share, costTokens: decodeCostTokens(plan.decodeJob) });
      await deps.queues.decode.add(DECODE_JOB_NAME, plan.decodeJob, { ...DEFAULT_DECODE_JOB_OPTIONS, jobId: requestDecodeJobId(plan.requestId), priority });
    }
  } catch (err) {
    if (isRedisUnavailable(err)) {
      // an add that timed out may still reach Redis once it is back: that job must not run for nobody
      deps.cancellations.cancel(plan.requestId);
      throw redisUnavailable(err);
    }
    throw err;
  }
}

/** How a relayed generation ended: every choice, and the usage (the prompt once, the choices summed). */
export interface Outcome {
  readonly choices: readonly AssembledChoice[];
  readonly usage: OpenAiUsage;
}

/** What the relay reports while it runs (SSE); every callback is optional. */
export interface RelayCallbacks {
  /** New text (or tokens with logprobs) of a choice. */
  readonly onDelta?: (delta: ChoiceDelta) => void;
  /** A choice ended (its final entry). */
  readonly onFinish?: (choice: number, finishReason: FinishReason) => void;
  /** A quiet job poll: where the request is. */
  readonly onProgress?: (progress: RelayProgress) => void;
}

/** The response metadata of a plan (ids, model, endpoint, the logprobs asked). */
export function responseMeta(deps: GenerationDeps, plan: GenerationPlan): ResponseMeta {
  return {
    id: plan.requestId,
    created: Math.floor(plan.acceptedAtMs / 1000),
    model: deps.model.name,
    endpoint: plan.request.endpoint,
    includeUsage: plan.request.includeUsage,
    logprobs: plan.request.logprobs,
  };
}

/** The assembly of a plan's choices from its streams (choice-assembly). */
export function choiceAssembly(deps: GenerationDeps, plan: GenerationPlan): ChoiceAssembly {
  const { request } = plan;
  return new ChoiceAssembly({ n: request.n, logprobs: request.logprobs !== null, echo: request.echo, promptIds: request.promptIds, tokenizer: deps.tokenizer });
}

class Aborted extends Error {
  constructor(readonly reason: AbortReason) {
    super(`request aborted: ${reason}`);
    this.name = 'Aborted';
  }
}

/** Runs an enqueued plan to its answer: an SSE response, or the whole JSON body (with the admission's headers). */
export async function respondGeneration(c: Context, deps: GenerationDeps, plan: GenerationPlan, admission: Admission = NO_LIMITS): Promise<Response> {
  const { request } = plan;
  const meta = responseMeta(deps, plan);
  const run = new GenerationRun(deps, plan, admission);
  const clientSignal = c.req.raw.signal;
  const onClientGone = (): void => run.abort('client');
  if (clientSignal.aborted) onClientGone();
  else clientSignal.addEventListener('abort', onClientGone, { once: true });
  const detach = (): void => clientSignal.removeEventListener('abort', onClientGone);

  if (!request.stream) {
    try {
      const outcome = await run.consume({});
      return c.json(completionBody(meta, outcome.choices, outcome.usage), 200, { ...admission.headers });
    } catch (err) {
      if (err instanceof Aborted) {
        if (err.reason === 'shutdown')
          throw new ApiError(503, 'the server is shutting down; the request was cancelled', { code: 'shutting_down', headers: { 'retry-after': '1' } });
        return new Response(null, { status: 499 }); // nobody is listening
      }
      throw err;
    } finally {
      run.release();
      detach();
    }
  }

  const sse = createSseWriter({ keepaliveMs: deps.config.sseKeepaliveMs, headers: admission.headers });
  sse.onCancel(onClientGone);
  for (let i = 0; i < request.n; i++) {
    const role = roleChunk(meta, i);
    if (role !== null) sse.send(role);
  }
  void (async () => {
    try {
      const outcome = await run.consume({
        onDelta: (delta) => sse.send(textChunk(meta, delta)),
        onFinish: (choice, finishReason) => sse.send(finishChunk(meta, choice, finishReason)),
        onProgress: (progress) => sse.comment(progressComment(progress)),
      });
      if (request.includeUsage) sse.send(usageChunk(meta, outcome.usage));
      sse.done();
    } catch (err) {
      if (err instanceof Aborted && err.reason === 'client') return;
      const apiError =
        err instanceof Aborted ? new ApiError(503, 'the server is shutting down; the request was cancelled', { code: 'shutting_down' }) : toApiError(err);
      const fields = {
        reqId: request.reqId,
        requestId: plan.requestId,
        status: apiError.status,
        code: apiError.code,
        err: apiError.detail ?? apiError.message,
      };
      if (apiError.status >= 500) deps.logger.warn(fields, 'stream ended with an error');
      else deps.logger.info(fields, 'stream ended with an error');
      sse.send(apiError.toJSON(request.reqId));
    } finally {
      sse.close();
      run.release();
      detach();
    }
  })();
  return sse.response;
}

/** The relay of one request with its metrics, cancellation and cleanup. */
class GenerationRun {
  private readonly controller = new AbortController();
  private readonly releaseInflight: () => void;
  private ended = false;

  constructor(
    private readonly deps: GenerationDeps,
    private readonly plan: GenerationPlan,
    private readonly admission: Admission,
  ) {
    this.releaseInflight = deps.inflight.track(this.controller);
    this.controller.signal.addEventListener(
      'abort',
      () => {
        if (!this.ended) this.setCancelKey();
      },
      { once: true },
    );
  }

  /** Releases the request's place in the in-flight set: call once its response is complete. */
  release(): void {
    this.ended = true;
    this.releaseInflight();
    this.admission.release();
  }

  abort(reason: AbortReason): void {
    if (!this.ended && !this.controller.signal.aborted) this.controller.abort(reason);
  }

  /** The request ends without its answer: its jobs must stop (retried until Redis takes it). */
  private setCancelKey(): void {
    if (this.ended) return;
    this.deps.cancellations.cancel(this.plan.requestId);
  }

  /**
   * Relays the request's streams, reporting each choice's new text and end to `callbacks` (and
   * where the request is at each quiet job poll); resolves with every choice once all ended.
   */
  async consume(callbacks: RelayCallbacks): Promise<Outcome> {
    const { deps, plan } = this;
    const labels = { endpoint: plan.request.endpoint, route: plan.route };
    let outcome: 'ok' | 'error' | 'cancelled' | 'timeout' = 'error';
    let queueWaits: Promise<void> | undefined;
    const assembly = choiceAssembly(deps, plan);
    let tokens = 0;
    let lastTokenMs = 0;
    try {
      const entries = relayStream(deps, {
        requestId: plan.requestId,
        decodeJobId: requestDecodeJobId(plan.requestId),
        prefillJobId: plan.route === 'prefill' ? requestPrefillJobId(plan.requestId) : null,
        deadlineMs: plan.acceptedAtMs + deps.config.requestTimeoutMs,
        signal: this.controller.signal,
        choices: plan.request.n,
        ...(callbacks.onProgress !== undefined ? { onProgress: callbacks.onProgress } : {}),
      });
      for await (const { choice, entry } of entries) {
        // the jobs have started once their stream shows an entry (awaited before the answer ends)
        queueWaits ??= this.observeQueueWaits();
        if (entry.kind === 'token') {
          const nowMs = Date.now();
          if (tokens === 0) deps.metrics.timeToFirstToken.observe(labels, (nowMs - plan.acceptedAtMs) / 1000);
          else deps.metrics.interTokenLatency.observe({ endpoint: plan.request.endpoint }, (nowMs - lastTokenMs) / 1000);
          lastTokenMs = nowMs;
          tokens += 1;
        } else if (entry.kind === 'error' || (entry.kind === 'final' && entry.finishReason === 'cancelled')) {
          this.fail(entry);
        }
        for (const delta of assembly.push(choice, entry as Exclude<typeof entry, { kind: 'error' }>)) callbacks.onDelta?.(delta);
        if (entry.kind === 'final' && entry.finishReason !== 'cancelled') callbacks.onFinish?.(choice, entry.finishReason);
        if (assembly.done) {
          const usage = assembly.usage({ promptTokens: plan.promptTokens });
          const endpoint = plan.request.endpoint;
          deps.metrics.promptTokens.inc({ endpoint }, usage.prompt_tokens);
          deps.metrics.completionTokens.inc({ endpoint }, usage.completion_tokens);
          deps.metrics.cachedTokens.inc({ endpoint }, usage.prompt_tokens_details.cached_tokens);
          outcome = 'ok';
          return { choices: assembly.choices(), usage };
        }
      }
      // The relay returned without every choice's end: it was aborted.
      outcome = 'cancelled';
      throw new Aborted((this.controller.signal.reason as AbortReason | undefined) ?? 'client');
    } catch (err) {
      if (err instanceof ApiError && err.code === 'timeout') outcome = 'timeout';
      if (err instanceof ApiError && err.code !== null && plan.request.documentId !== null && plan.documentCreatedAt !== null) {
        // the worker could not read the document's artifact: its status says so from now on
        await markDocumentDamaged(deps, plan.request.tenant, plan.request.documentId, plan.documentCreatedAt, err.code.replaceAll('_', '-'));
      }
      throw err;
    } finally {
      // answered with an error, timed out or cut off: whatever still runs for this request stops
      // (a client that got a 503 because Redis froze must not have its 300 tokens generated later)
      if (outcome !== 'ok') this.setCancelKey();
      await queueWaits;
      this.ended = true;
      deps.metrics.e2eLatency.observe({ ...labels, outcome }, (Date.now() - plan.acceptedAtMs) / 1000);
      if (plan.route === 'prefill') void this.cleanupPromptArtifact();
    }
  }

  /** An error entry → its ApiError; a cancelled final (of any choice) → the request was cancelled. Always throws. */
  private fail(entry: Extract<StreamEntry, { kind: 'final' | 'error' }>): never {
    if (entry.kind === 'error') throw workerError(entry.code, entry.message);
    // The worker honoured our cancel key (client gone, shutdown) or someone else's.
    if (this.controller.signal.aborted) throw new Aborted((this.controller.signal.reason as AbortReason | undefined) ?? 'client');
    throw new ApiError(503, 'the request was cancelled before it finished', { code: 'cancelled' });
  }

  /** Queue wait of the request's jobs (they have started once their stream shows an entry). */
  private async observeQueueWaits(): Promise<void> {
    const { deps, plan } = this;
    try {
      const jobs = [
        { queue: 'decode' as const, job: await deps.queues.decode.getJob(requestDecodeJobId(plan.requestId)) },
        ...(plan.route === 'prefill' ? [{ queue: 'prefill' as const, job: await deps.queues.prefill.getJob(requestPrefillJobId(plan.requestId)) }] : []),
      ];
      for (const { queue, job } of jobs) {
        if (job?.processedOn !== undefined && job.processedOn >= job.timestamp)
          deps.metrics.queueWait.observe({ queue }, (job.processedOn - job.timestamp) / 1000);
      }
    } catch {
      // metrics only
    }
  }

  /**
   * A long prompt's artifact serves this request only: once its stream ended, its manifest is
   * removed (chunks stay: content-addressed, an identical prefix reuses them). Its size is counted.
   */
  private async cleanupPromptArtifact(): Promise<void> {
    const { deps, plan } = this;
    try {
      const job = await deps.queues.prefill.getJob(requestPrefillJobId(plan.requestId));
      const bytes = job?.returnvalue?.artifactBytes;
      if (typeof bytes === 'number' && bytes > 0) deps.metrics.artifactBytes.inc({ kind: 'prompt' }, bytes);
      // a prefill still running leaves nothing: the request's cancel key is set, and it checks it
      if (job !== undefined && (await job.getState()) === 'completed') await deletePromptArtifact(deps, plan.request.tenant, plan.requestId);
    } catch (err) {
      deps.logger.debug(
        { reqId: plan.request.reqId, requestId: plan.requestId, err: err instanceof Error ? err.message : String(err) },
        'prompt artifact cleanup skipped',
      );
    }
  }
}
