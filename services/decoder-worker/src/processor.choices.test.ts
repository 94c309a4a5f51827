/**
 * The processor's n choices, logprobs and echo against a scripted engine (a fake of the engine only:
 * real Redis, real streams): one generate call with n choices, one stream per choice, logprobs in the
 * token entries, the prompt entry before any token, per-choice resumes with the exactly-once rules,
 * cancel of every choice, usage that counts the prompt once.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { GenerateHooks, GenerateOutcome, GenerateRequest, TokenEvent } from '@csa2/engine';
import {
  UnrecoverableError,
  appendStreamEntry,
  cancelKey,
  choiceStreamId,
  connectRedis,
  startLocalRedis,
  type DecodeJob,
  type DecodeResult,
  type Job,
  type LocalRedis,
  type Redis,
  type StreamEntry,
} from '@csa2/jobs';
import { readStreamEntries } from '@csa2/jobs/testing';
import { createDecodeProcessor, type DecodeEngine } from './processor.js';

let server: LocalRedis;
let redis: Redis;
let seq = 0;

before(async () => {
  server = await startLocalRedis();
  redis = connectRedis(server.url);
});
after(async () => {
  await redis?.quit();
  await server?.stop();
});

/** Choice c's token i: a letter per choice, so a stream shows whose tokens it holds. */
const tokenOf = (c: number, i: number): number => 97 + c * 5 + (i % 5);
const logprobOf = (c: number, i: number): number => -(c + 1) / 10 - i / 100;
const PROMPT_LOGPROBS = [
  null,
  {
    id: 11,
    logprob: -2.5,
    topLogprobs: [
      { id: 12, logprob: -0.5 },
      { id: 11, logprob: -2.5 },
    ],
  },
];

interface Script {
  /** Tokens per choice. */
  readonly lengths: readonly number[];
  /** Steps to run before waiting for the signal (cancel tests): the generation stops there until aborted. */
  readonly hangAfter?: number;
  /** The outcome says the document's stored encoder tail was not used, and why. */
  readonly tailRejected?: string;
}

/**
 * An engine that generates `lengths[c]` tokens for choice c, round-robin over the choices per step,
 * reporting the tokens at or after each choice's resume point, with logprobs when asked, and the
 * prompt logprobs first when asked. It stops (finish 'cancelled') when its signal aborts.
 */
class ScriptedEngine implements DecodeEngine {
  readonly alive = true;
  readonly requests: GenerateRequest[] = [];
  constructor(private readonly script: Script) {}

  async generate(req: GenerateRequest, hooks: GenerateHooks = {}): Promise<GenerateOutcome> {
    this.requests.push(req);
    const n = req.n ?? 1;
    const resumes = req.resumeChoices ?? [req.resumeTokens ?? []];
    const lengths = Array.from({ length: n }, (_, c) => Math.min(req.maxTokens, this.script.lengths[c] ?? 0));
    const tokens: number[][] = lengths.map(() => []);
    if (req.promptLogprobs !== undefined) hooks.onPromptLogprobs?.(PROMPT_LOGPROBS);
    const steps = Math.max(...lengths);
    let cancelled = false;
    for (let i = 0; i < steps; i++) {
      if (this.script.hangAfter !== undefined && i === this.script.hangAfter) {
        await new Promise<void>((resolve) =>
          hooks.signal?.aborted === true ? resolve() : hooks.signal?.addEventListener('abort', () => resolve(), { once: true }),
        );
      }
      if (hooks.signal?.aborted === true) {
        cancelled = true;
        break;
      }
      for (let c = 0; c < n; c++) {
        if (i >= (lengths[c] ?? 0)) continue;
        const resumed = resumes[c] ?? [];
        const id = i < resumed.length ? (resumed[i] as number) : tokenOf(c, i);
        (tokens[c] as number[]).push(id);
        if (i < resumed.length) continue;
        const event: TokenEvent = {
          choice: c,
          index: i,
          id,
          text: String.fromCharCode(id),
          ...(req.logprobs !== undefined
            ? {
                logprob: logprobOf(c, i),
                topLogprobs: [
                  { id, logprob: logprobOf(c, i) },
                  { id: 3, logprob: -9 },
                ].slice(0, Math.max(1, req.logprobs)),
              }
            : {}),
        };
        hooks.onToken?.(event);
      }
      await new Promise((r) => setImmediate(r));
    }
    for (let c = 0; c < n; c++) if (!cancelled) hooks.onToken?.({ choice: c, index: tokens[c]?.length ?? 0, id: -1, text: `.${c}` });
    const choices = tokens.map((t) => ({ tokens: t, text: '', finishReason: cancelled ? ('cancelled' as const) : ('length' as const), logits: [] }));
    const first = choices[0] as (typeof choices)[number];
    const tail = this.script.tailRejected !== undefined ? { storedTailRejected: this.script.tailRejected } : {};
    return {
      tokens: first.tokens,
      text: '',
      finishReason: first.finishReason,
      choices,
      promptTokens: req.promptIds.length,
      cachedTokens: 0,
      ...tail,
      timings: { prefillMs: 1, decodeMs: 1 },
      logits: [],
    };
  }

  async close(): Promise<void> {}
}

function decodeJob(over: Partial<DecodeJob> = {}): DecodeJob {
  return {
    v: 1,
    requestId: `c${++seq}-${Date.now()}`,
    tenant: 'acme',
    model: 'tiny',
    promptIds: [1, 2, 3, 4],
    documentId: null,
    sampling: { temperature: 0.7, topP: 1, seed: 5 },
    maxTokens: 6,
    stop: [],
    ignoreEos: true,
    replayTokens: null,
    acceptedAtMs: Date.now(),
    ...over,
  };
}

/** A job as BullMQ hands it to the processor (the fields the processor reads). */
function fakeJob(data: DecodeJob, attemptsMade = 0): Job<unknown, DecodeResult> {
  return { id: `j-${data.requestId}`, data, opts: { attempts: 3, priority: 0 }, attemptsMade } as unknown as Job<unknown, DecodeResult>;
}

/** The processor on `engine`; `appendedTo` collects the stream keys of its appends, in order; `logs` its log lines. */
function processorFor(engine: ScriptedEngine, appendedTo?: string[], logs?: Array<{ level: string; msg: string; fields?: Readonly<Record<string, unknown>> }>) {
  const spied =
    appendedTo === undefined
      ? redis
      : new Proxy(redis, {
          get(target, prop, receiver) {
            const v: unknown = Reflect.get(target, prop, receiver);
            if ((prop === 'evalsha' || prop === 'eval') && typeof v === 'function') {
              return (...args: unknown[]) => {
                appendedTo.push(String(args[2]));
                return (v as (...a: unknown[]) => unknown).apply(target, args);
              };
            }
            return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
          },
        });
  return createDecodeProcessor({
    redis: spied,
    engine: async () => engine,
    cancelPollMs: 5,
    ...(logs !== undefined ? { log: (level, msg, fields) => logs.push({ level, msg, ...(fields !== undefined ? { fields } : {}) }) } : {}),
  });
}

async function choiceEntries(requestId: string, choice: number): Promise<StreamEntry[]> {
  return (await readStreamEntries(redis, choiceStreamId(requestId, choice))).map((e) => e.entry);
}

test("n = 3: one generate call; each choice on its own stream, choice 0 on the request's; usage counts the prompt once", async () => {
  const engine = new ScriptedEngine({ lengths: [6, 4, 5] });
  const job = decodeJob({ n: 3 });
  const result = await processorFor(engine)(fakeJob(job), undefined, undefined);
  assert.equal(engine.requests.length, 1);
  assert.equal(engine.requests[0]?.n, 3);
  assert.equal(engine.requests[0]?.resumeChoices, undefined);
  for (const [c, length] of [6, 4, 5].entries()) {
    const entries = await choiceEntries(job.requestId, c);
    assert.deepEqual(
      entries.slice(0, -1).map((e) => (e.kind === 'token' ? [e.index, e.id] : e.kind)),
      Array.from({ length }, (_, i) => [i, tokenOf(c, i)]),
      `choice ${c}`,
    );
    const end = entries.at(-1);
    assert.ok(
      end?.kind === 'final' && end.tokens === length && end.text === `.${c}` && end.usage.prompt_tokens === 4 && end.usage.completion_tokens === length,
      JSON.stringify(end),
    );
  }
  assert.equal(await redis.exists(`csa2:stream:${job.requestId}:3`), 0, 'no stream past n');
  assert.deepEqual(result, { finishReason: 'length', promptTokens: 4, cachedTokens: 0, completionTokens: 15 });
});

test("logprobs: token entries carry the logprob and the alternatives; the prompt entry opens choice 0's stream before any token", async () => {
  const engine = new ScriptedEngine({ lengths: [3, 3] });
  const job = decodeJob({ n: 2, logprobs: 2, promptLogprobs: 1 });
  const appendedTo: string[] = [];
  await processorFor(engine, appendedTo)(fakeJob(job), undefined, undefined);
  assert.equal(engine.requests[0]?.logprobs, 2);
  assert.equal(engine.requests[0]?.promptLogprobs, 1);
  const zero = await choiceEntries(job.requestId, 0);
  assert.deepEqual(zero[0], {
    kind: 'prompt',
    logprobs: [
      null,
      {
        id: 11,
        logprob: -2.5,
        top: [
          { id: 12, logprob: -0.5 },
          { id: 11, logprob: -2.5 },
        ],
      },
    ],
  });
  const one = await choiceEntries(job.requestId, 1);
  assert.deepEqual(one[1], {
    kind: 'token',
    index: 1,
    id: tokenOf(1, 1),
    text: String.fromCharCode(tokenOf(1, 1)),
    logprob: logprobOf(1, 1),
    top: [
      { id: tokenOf(1, 1), logprob: logprobOf(1, 1) },
      { id: 3, logprob: -9 },
    ],
  });
  assert.ok(
    one.every((e) => e.kind !== 'prompt'),
    'the prompt entry is in choice 0 only',
  );
  // the first append of the request is the prompt entry's (choice 0), then tokens of both choices
  assert.equal(appendedTo[0], `csa2:stream:${job.requestId}`);
  assert.equal(appendedTo.length, 1 + 6 + 2, 'prompt, 3 tokens per choice, 2 finals');
  assert.ok(appendedTo.slice(1, 3).includes(`csa2:stream:${job.requestId}:1`), `choices interleave: ${appendedTo.join(' ')}`);
});

test('a retry resumes every choice from its own stream; a choice whose stream ended keeps its end', async () => {
  const job = decodeJob({ n: 3, maxTokens: 5 });
  // what a first attempt left: choice 0 has 2 tokens, choice 1 ended (3 tokens), choice 2 nothing
  const usage = { prompt_tokens: 4, completion_tokens: 3, total_tokens: 7, prompt_tokens_details: { cached_tokens: 0 } };
  for (let i = 0; i < 2; i++) await appendStreamEntry(redis, job.requestId, { kind: 'token', index: i, id: tokenOf(0, i), text: `p${i}` });
  for (let i = 0; i < 3; i++) await appendStreamEntry(redis, choiceStreamId(job.requestId, 1), { kind: 'token', index: i, id: tokenOf(1, i), text: `q${i}` });
  await appendStreamEntry(redis, choiceStreamId(job.requestId, 1), { kind: 'final', finishReason: 'stop', usage, tokens: 3 });
  const ended = await readStreamEntries(redis, choiceStreamId(job.requestId, 1));
  const engine = new ScriptedEngine({ lengths: [5, 5, 5] });
  const result = await processorFor(engine)(fakeJob(job, 1), undefined, undefined);
  assert.deepEqual(engine.requests[0]?.resumeChoices, [[tokenOf(0, 0), tokenOf(0, 1)], [tokenOf(1, 0), tokenOf(1, 1), tokenOf(1, 2)], []]);
  const zero = await choiceEntries(job.requestId, 0);
  const letter = (i: number) => String.fromCharCode(tokenOf(0, i));
  assert.deepEqual(
    zero.slice(0, -1).map((e) => (e.kind === 'token' ? [e.index, e.text] : e.kind)),
    [
      [0, 'p0'],
      [1, 'p1'],
      [2, letter(2)],
      [3, letter(3)],
      [4, letter(4)],
    ],
  );
  assert.deepEqual(await readStreamEntries(redis, choiceStreamId(job.requestId, 1)), ended, 'the ended choice is untouched');
  const two = await choiceEntries(job.requestId, 2);
  assert.equal(two.filter((e) => e.kind === 'token').length, 5);
  assert.deepEqual(result, { finishReason: 'length', promptTokens: 4, cachedTokens: 0, completionTokens: 5 + 3 + 5 });
});

test("every choice's stream ended: the job returns at once, summing them; an error entry fails it for good", async () => {
  const job = decodeJob({ n: 2 });
  const usage = (k: number) => ({ prompt_tokens: 4, completion_tokens: k, total_tokens: 4 + k, prompt_tokens_details: { cached_tokens: 1 } });
  await appendStreamEntry(redis, job.requestId, { kind: 'final', finishReason: 'stop', usage: usage(0), tokens: 0 });
  await appendStreamEntry(redis, choiceStreamId(job.requestId, 1), { kind: 'token', index: 0, id: 1, text: 'a' });
  await appendStreamEntry(redis, choiceStreamId(job.requestId, 1), { kind: 'final', finishReason: 'length', usage: usage(1), tokens: 1 });
  const engine = new ScriptedEngine({ lengths: [5, 5] });
  assert.deepEqual(await processorFor(engine)(fakeJob(job), undefined, undefined), {
    finishReason: 'stop',
    promptTokens: 4,
    cachedTokens: 1,
    completionTokens: 1,
  });
  assert.equal(engine.requests.length, 0, 'nothing generated');

  const failed = decodeJob({ n: 2 });
  await appendStreamEntry(redis, failed.requestId, { kind: 'error', code: 'not-found', message: 'no such document' });
  await assert.rejects(
    processorFor(engine)(fakeJob(failed), undefined, undefined),
    (err: unknown) => err instanceof UnrecoverableError && /not-found/.test(err.message),
  );
});

test('cancel stops every choice: each open stream ends cancelled after a gap-free prefix', async () => {
  const engine = new ScriptedEngine({ lengths: [50, 50], hangAfter: 3 });
  const job = decodeJob({ n: 2, maxTokens: 50 });
  const running = processorFor(engine)(fakeJob(job), undefined, undefined);
  await new Promise((r) => setTimeout(r, 30));
  await redis.set(cancelKey(job.requestId), '1', 'EX', 60);
  const result = await running;
  assert.equal(result.finishReason, 'cancelled');
  for (const c of [0, 1]) {
    const entries = await choiceEntries(job.requestId, c);
    const end = entries.at(-1);
    assert.ok(end?.kind === 'final' && end.finishReason === 'cancelled' && end.tokens === 3, JSON.stringify(end));
    entries.slice(0, -1).forEach((e, i) => assert.ok(e.kind === 'token' && e.index === i));
  }
  assert.equal(result.completionTokens, 6);

  const early = decodeJob({ n: 3 });
  await redis.set(cancelKey(early.requestId), '1', 'EX', 60);
  await processorFor(engine)(fakeJob(early), undefined, undefined);
  for (const c of [0, 1, 2])
    assert.deepEqual(
      (await choiceEntries(early.requestId, c)).map((e) => (e.kind === 'final' ? e.finishReason : e.kind)),
      ['cancelled'],
    );
});

test('maxTokens 0 (echo of the prompt only): the prompt entry and a final entry of 0 tokens per choice, nothing generated is written', async () => {
  const engine = new ScriptedEngine({ lengths: [3, 3] });
  const job = decodeJob({ n: 2, maxTokens: 0, promptLogprobs: 0, logprobs: 0 });
  const result = await processorFor(engine)(fakeJob(job), undefined, undefined);
  assert.equal(engine.requests[0]?.maxTokens, 1, 'the engine generates at least one token');
  assert.equal(engine.requests[0]?.logprobs, undefined, 'no token logprobs to compute');
  assert.deepEqual(
    (await choiceEntries(job.requestId, 0)).map((e) => e.kind),
    ['prompt', 'final'],
  );
  const end = (await choiceEntries(job.requestId, 1))[0];
  assert.ok(end?.kind === 'final' && end.tokens === 0 && end.finishReason === 'length' && end.text === undefined, JSON.stringify(end));
  assert.deepEqual(result, { finishReason: 'length', promptTokens: 4, cachedTokens: 0, completionTokens: 0 });
});

test("n = 1 keeps the request's single stream and today's resume (resumeTokens)", async () => {
  const job = decodeJob({ maxTokens: 4 });
  await appendStreamEntry(redis, job.requestId, { kind: 'token', index: 0, id: tokenOf(0, 0), text: 'x' });
  const engine = new ScriptedEngine({ lengths: [4] });
  const result = await processorFor(engine)(fakeJob(job, 1), undefined, undefined);
  assert.deepEqual(engine.requests[0]?.resumeTokens, [tokenOf(0, 0)]);
  assert.equal(engine.requests[0]?.n, undefined);
  assert.equal((await choiceEntries(job.requestId, 0)).filter((e) => e.kind === 'token').length, 4);
  assert.equal(await redis.exists(`csa2:stream:${job.requestId}:1`), 0);
  assert.equal(result.completionTokens, 4);
});

test('a document whose stored encoder tail was not used: the request completes as usual and a warning names the job and the reason', async () => {
  const engine = new ScriptedEngine({ lengths: [3], tailRejected: 'document doc-1: encoder tail: its SHA-256 checksum does not match its bytes' });
  const job = decodeJob({ documentId: 'doc-1' });
  const logs: Array<{ level: string; msg: string; fields?: Readonly<Record<string, unknown>> }> = [];
  const result = await processorFor(engine, undefined, logs)(fakeJob(job), undefined, undefined);
  assert.equal(result.finishReason, 'length');
  const warn = logs.find((l) => l.level === 'warn' && /stored encoder tail/.test(l.msg));
  assert.ok(warn !== undefined, JSON.stringify(logs));
  assert.equal(warn.fields?.['jobId'], `j-${job.requestId}`);
  assert.match(String(warn.fields?.['reason']), /SHA-256 checksum/);
  const quiet: typeof logs = [];
  await processorFor(new ScriptedEngine({ lengths: [3] }), undefined, quiet)(fakeJob(decodeJob({ documentId: 'doc-1' })), undefined, undefined);
  assert.equal(quiet.filter((l) => l.level === 'warn').length, 0, 'no warning when the tail was used or there was none');
  // the job's log says where the time to its first token went: before the engine, and in it
  const done = quiet.find((l) => l.msg === 'decode done');
  assert.ok(done !== undefined, JSON.stringify(quiet));
  for (const k of ['queueMs', 'toEngineMs', 'firstTokenMs'])
    assert.ok(Number.isFinite(done.fields?.[k]) && (done.fields?.[k] as number) >= 0, `${k}: ${String(done.fields?.[k])}`);
  assert.equal(done.fields?.['enginePrefillMs'], 1, "the engine's own prefill time, as it reported it");
});
