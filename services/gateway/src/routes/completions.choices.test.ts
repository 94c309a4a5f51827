/**
 * n, logprobs and echo through the gateway against a fake decoder that writes what the real one does
 * (one stream per choice, token entries with lp, the prompt entry opening choice 0's stream): the
 * jobs carry the fields, the bodies and streamed chunks have OpenAI's shapes and values, streamed
 * equals non-streamed, and a stream that contradicts the request is a 500, never a wrong answer.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { initModel } from '@csa2/core';
import { choiceStreamId, type DecodeJob, type StreamEntry } from '@csa2/jobs';
import { MODEL_NAME, fakeDecoder, finalEntry, parseSse, post, startHarness, writeEntries, type Harness } from '../testing/harness.js';

type Json = Record<string, any>;

/** Choice c's text: one byte token per character. */
const CHOICE_TEXTS = ['Hi!', 'Yo', 'Hey', 'Ok'];
/** The logprob of choice c's token i, and its one alternative ('x', -3). */
const lpOf = (c: number, i: number): number => -0.25 * (i + 1) - c;
/** Prompt token k's logprob given the tokens before it (k ≥ 1; k = 0 has none). */
const promptLpOf = (k: number): number => -k / 8;

/** The entries the real decoder writes for choice c of `job` (logprobs and prompt entry as the job asks). */
function choiceEntries(job: DecodeJob, c: number, opts: { dropLp?: boolean } = {}): StreamEntry[] {
  const out: StreamEntry[] = [];
  if (c === 0 && job.promptLogprobs !== undefined) {
    out.push({
      kind: 'prompt',
      logprobs: job.promptIds.map((id, k) => (k === 0 ? null : { id, logprob: promptLpOf(k), top: [{ id: 32, logprob: -0.5 }].slice(0, job.promptLogprobs) })),
    });
  }
  const text = job.maxTokens === 0 ? '' : (CHOICE_TEXTS[c] ?? '');
  [...text].forEach((ch, i) => {
    const id = ch.charCodeAt(0);
    const lp =
      job.logprobs !== undefined && opts.dropLp !== true
        ? {
            logprob: lpOf(c, i),
            top: [
              { id, logprob: lpOf(c, i) },
              { id: 120, logprob: -3 },
            ].slice(0, job.logprobs),
          }
        : {};
    out.push({ kind: 'token', index: i, id, text: ch, ...lp });
  });
  out.push(finalEntry(job, text.length, { finishReason: job.maxTokens === 0 ? 'length' : 'stop' }));
  return out;
}

describe('n, logprobs and echo through the gateway', () => {
  let h: Harness;
  const jobs: DecodeJob[] = [];

  before(async () => {
    h = await startHarness();
    fakeDecoder(h, async (job) => {
      jobs.push(job.data);
      const prompt = Buffer.from(job.data.promptIds.filter((id) => id < 256)).toString('latin1');
      for (let c = 0; c < (job.data.n ?? 1); c++) {
        // 'no-lp' / 'no-prompt-entry': a decoder that does not honour the job's logprobs
        let entries = choiceEntries(job.data, c, { dropLp: prompt.includes('no-lp') });
        if (prompt.includes('no-prompt-entry')) entries = entries.filter((e) => e.kind !== 'prompt');
        await writeEntries(h.redis, choiceStreamId(job.data.requestId, c), entries);
      }
    });
  });
  after(async () => {
    await h.close();
  });

  const completion = async (body: Json): Promise<Json> => {
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, ...body }));
    assert.equal(res.status, 200, await res.clone().text());
    return (await res.json()) as Json;
  };
  const streamed = async (path: string, body: Json): Promise<Json[]> => {
    const res = await h.app.request(...post(path, { model: MODEL_NAME, ...body, stream: true, stream_options: { include_usage: true } }));
    assert.equal(res.status, 200, await res.clone().text());
    const events = parseSse(await res.text());
    assert.equal(events.at(-1), '[DONE]');
    return events.slice(0, -1).map((e) => JSON.parse(e) as Json);
  };
  const jobOf = (id: string): DecodeJob => {
    const job = jobs.find((j) => j.requestId === id);
    assert.ok(job !== undefined, `the job of ${id}`);
    return job;
  };

  test('n = 3: three choices with their index, one decode job with n, usage counts the prompt once and sums the choices', async () => {
    const body = await completion({ prompt: 'three', n: 3, seed: 10, max_tokens: 4 });
    assert.deepEqual(
      body['choices'],
      [0, 1, 2].map((i) => ({ index: i, text: CHOICE_TEXTS[i], logprobs: null, finish_reason: 'stop' })),
    );
    assert.deepEqual(body['usage'], { prompt_tokens: 5, completion_tokens: 3 + 2 + 3, total_tokens: 13, prompt_tokens_details: { cached_tokens: 0 } });
    const job = jobOf(body['id']);
    assert.equal(job.n, 3);
    assert.equal(job.sampling.seed, 10, 'choice i samples with seed + i (the engine adds i)');
    assert.equal(job.logprobs, undefined);
    assert.equal(job.promptLogprobs, undefined);
    // best_of equal to n is accepted
    assert.equal((await completion({ prompt: 'best of', n: 2, best_of: 2 }))['choices'].length, 2);
  });

  test('completions logprobs: tokens, token_logprobs, top_logprobs (top N plus the sampled token) and text_offset', async () => {
    const body = await completion({ prompt: 'lp', logprobs: 1, max_tokens: 3 });
    assert.equal(jobOf(body['id']).logprobs, 1);
    const choice = body['choices'][0];
    assert.equal(choice.text, 'Hi!');
    assert.deepEqual(choice.logprobs, {
      tokens: ['H', 'i', '!'],
      token_logprobs: [lpOf(0, 0), lpOf(0, 1), lpOf(0, 2)],
      top_logprobs: [{ H: lpOf(0, 0) }, { i: lpOf(0, 1) }, { '!': lpOf(0, 2) }],
      text_offset: [0, 1, 2],
    });
    // logprobs 2: the alternative too; logprobs 0: the sampled token only
    assert.deepEqual((await completion({ prompt: 'lp2', logprobs: 2 }))['choices'][0].logprobs.top_logprobs[0], { H: lpOf(0, 0), x: -3 });
    assert.deepEqual((await completion({ prompt: 'lp0', logprobs: 0 }))['choices'][0].logprobs.top_logprobs[1], { i: lpOf(0, 1) });
  });

  test("echo: the prompt precedes every choice's text; with logprobs its tokens come first, the first without context null", async () => {
    const plain = await completion({ prompt: 'Echo me', echo: true, n: 2 });
    assert.deepEqual(
      plain['choices'].map((c: Json) => c['text']),
      ['Echo meHi!', 'Echo meYo'],
    );
    assert.equal(jobOf(plain['id']).promptLogprobs, undefined, 'no prompt logprobs without logprobs');

    const body = await completion({ prompt: 'Echo', echo: true, logprobs: 1 });
    const job = jobOf(body['id']);
    assert.equal(job.promptLogprobs, 1);
    assert.equal(job.logprobs, 1);
    const lp = body['choices'][0].logprobs;
    assert.equal(body['choices'][0].text, 'EchoHi!');
    assert.deepEqual(lp.tokens, ['E', 'c', 'h', 'o', 'H', 'i', '!']);
    assert.deepEqual(lp.token_logprobs, [null, promptLpOf(1), promptLpOf(2), promptLpOf(3), lpOf(0, 0), lpOf(0, 1), lpOf(0, 2)]);
    assert.deepEqual(lp.top_logprobs.slice(0, 2), [null, { ' ': -0.5, c: promptLpOf(1) }]);
    assert.deepEqual(lp.text_offset, [0, 1, 2, 3, 4, 5, 6]);
  });

  test('echo with max_tokens 0 answers the prompt only (with its logprobs); the job generates nothing', async () => {
    const body = await completion({ prompt: 'Score this', echo: true, logprobs: 0, max_tokens: 0 });
    const job = jobOf(body['id']);
    assert.equal(job.maxTokens, 0);
    assert.equal(job.logprobs, undefined, 'no generated token to score');
    assert.equal(job.promptLogprobs, 0);
    const choice = body['choices'][0];
    assert.equal(choice.text, 'Score this');
    assert.equal(choice.finish_reason, 'length');
    assert.deepEqual(choice.logprobs.token_logprobs, [null, ...[...'core this'].map((_, k) => promptLpOf(k + 1))]);
    assert.deepEqual(body['usage'], { prompt_tokens: 10, completion_tokens: 0, total_tokens: 10, prompt_tokens_details: { cached_tokens: 0 } });
  });

  test('echo with logprobs of a prompt past CSA2_PREFILL_THRESHOLD_TOKENS goes to the decoder itself (the encoder route could not score it)', async () => {
    const long = 'x'.repeat(150); // the harness's threshold is 100
    const body = await completion({ prompt: long, echo: true, logprobs: 0, max_tokens: 1 });
    const job = jobOf(body['id']);
    assert.equal(job.documentId, null);
    assert.equal(job.promptIds.length, 150, 'the whole prompt in the decode job');
    assert.equal(body['choices'][0].logprobs.tokens.length, 150 + 3);
    assert.deepEqual(await h.deps.queues.prefill.getJobs(['completed', 'wait', 'active', 'prioritized', 'failed']), []);
  });

  test("streamed equals non-streamed: per choice the texts and the logprobs lists concatenate to the body's; one finish chunk per choice, one usage chunk", async () => {
    const request = { prompt: 'Same', n: 2, logprobs: 2, echo: true, seed: 3 };
    const body = await completion(request);
    const chunks = await streamed('/v1/completions', request);
    const usage = chunks.at(-1);
    assert.deepEqual(usage?.['choices'], []);
    assert.deepEqual(usage?.['usage'], body['usage']);
    const finishes = chunks.filter((c) => c['choices'][0]?.finish_reason !== null && c['choices'].length > 0);
    assert.deepEqual(finishes.map((c) => [c['choices'][0].index, c['choices'][0].finish_reason]).sort(), [
      [0, 'stop'],
      [1, 'stop'],
    ]);
    for (const choice of body['choices'] as Json[]) {
      const mine = chunks.filter((c) => c['choices'][0]?.index === choice['index'] && c['choices'][0]?.finish_reason === null).map((c) => c['choices'][0]);
      assert.equal(mine.map((c: Json) => c['text']).join(''), choice['text']);
      const joined = { tokens: [] as unknown[], token_logprobs: [] as unknown[], top_logprobs: [] as unknown[], text_offset: [] as unknown[] };
      for (const c of mine) for (const k of Object.keys(joined) as (keyof typeof joined)[]) joined[k].push(...c.logprobs[k]);
      assert.deepEqual(joined, choice['logprobs'], `choice ${choice['index']}`);
    }
    assert.equal(new Set(chunks.map((c) => c['id'])).size, 1, 'one response id');
  });

  test('chat: logprobs.content with bytes and top_logprobs; n = 2 streamed: a role chunk per choice, streamed equals non-streamed', async () => {
    const request = { messages: [{ role: 'user', content: 'chat lp' }], logprobs: true, top_logprobs: 2, n: 2 };
    const res = await h.app.request(...post('/v1/chat/completions', { model: MODEL_NAME, ...request }));
    const body = (await res.json()) as Json;
    assert.equal(jobOf(body['id']).logprobs, 2);
    assert.equal(body['choices'][1].message.content, 'Yo');
    assert.deepEqual(body['choices'][1].logprobs, {
      content: [
        {
          token: 'Y',
          logprob: lpOf(1, 0),
          bytes: [89],
          top_logprobs: [
            { token: 'Y', logprob: lpOf(1, 0), bytes: [89] },
            { token: 'x', logprob: -3, bytes: [120] },
          ],
        },
        {
          token: 'o',
          logprob: lpOf(1, 1),
          bytes: [111],
          top_logprobs: [
            { token: 'o', logprob: lpOf(1, 1), bytes: [111] },
            { token: 'x', logprob: -3, bytes: [120] },
          ],
        },
      ],
      refusal: null,
    });
    const chunks = await streamed('/v1/chat/completions', request);
    const roles = chunks.filter((c) => c['choices'][0]?.delta?.role === 'assistant').map((c) => c['choices'][0].index);
    assert.deepEqual(roles, [0, 1]);
    for (const choice of body['choices'] as Json[]) {
      const mine = chunks
        .filter((c) => c['choices'][0]?.index === choice['index'] && c['choices'][0].finish_reason === null && c['choices'][0].delta.role === undefined)
        .map((c) => c['choices'][0]);
      assert.equal(mine.map((c: Json) => c['delta'].content).join(''), choice['message'].content);
      assert.deepEqual(
        mine.flatMap((c: Json) => c['logprobs'].content),
        choice['logprobs'].content,
      );
    }
    // logprobs: true without top_logprobs: the tokens, no alternatives
    const bare = (await (
      await h.app.request(...post('/v1/chat/completions', { model: MODEL_NAME, messages: [{ role: 'user', content: 'bare' }], logprobs: true }))
    ).json()) as Json;
    assert.deepEqual(bare['choices'][0].logprobs.content[0].top_logprobs, []);
    assert.equal(jobOf(bare['id']).logprobs, 0);
  });

  test('a stream that contradicts the request is a 500 stream_invalid, never an answer without its logprobs', async () => {
    for (const [prompt, extra] of [
      ['no-lp', { logprobs: 1 }],
      ['no-prompt-entry', { logprobs: 1, echo: true }],
    ] as const) {
      const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt, ...extra }));
      assert.equal(res.status, 500, prompt);
      assert.equal(((await res.json()) as Json)['error'].code, 'stream_invalid');
    }
  });
});

describe('echo with logprobs beyond what one decode job carries', () => {
  let h: Harness;
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'csa2-gateway-echo-'));
    const config = { vocab_size: 256, max_seq_len: 8192 };
    const modelDir = join(dir, 'model');
    const base = JSON.parse(readFileSync(new URL('../../../../packages/csa2-core/configs/v41-tiny.json', import.meta.url), 'utf8')) as Json;
    await initModel({ ...base, ...config }, { seed: 2, outDir: modelDir });
    h = await startHarness({ CSA2_MODEL_DIR: modelDir });
  });
  after(async () => {
    await h?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a prompt over 4,096 tokens with echo and logprobs → 400 naming echo (without logprobs it would go through an encoder)', async () => {
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'y'.repeat(5000), echo: true, logprobs: 1, max_tokens: 1 }));
    const body = (await res.json()) as Json;
    assert.equal(res.status, 400, JSON.stringify(body));
    assert.equal(body['error'].param, 'echo');
    assert.match(body['error'].message, /at most 4096 tokens.*got 5000/);
    assert.equal(await h.deps.queues.decode.count(), 0);
  });
});
