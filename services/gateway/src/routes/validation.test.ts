import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { DECODE_JOB_NAME, documentJobId, PREFILL_JOB_NAME, type DecodeJob, type PrefillJob } from '@csa2/jobs';
import { KEY_A, KEY_B, MODEL_NAME, TENANT_A, get, post, startHarness, writeManifest, type Harness } from '../testing/harness.js';

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** Asserts an OpenAI-shaped error with `status` and the given fields; returns it. */
async function expectError(res: Response, status: number, fields: Partial<ErrorBody['error']> = {}): Promise<ErrorBody['error']> {
  const text = await res.text();
  assert.equal(res.status, status, text);
  assert.match(res.headers.get('content-type') ?? '', /application\/json/);
  const body = JSON.parse(text) as ErrorBody;
  assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0);
  for (const [k, v] of Object.entries(fields)) assert.equal(body.error[k as keyof ErrorBody['error']], v, `error.${k}`);
  return body.error;
}

describe('request validation (no worker: nothing may be enqueued)', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ CSA2_MAX_QUEUE_DEPTH: '3' });
  });
  after(async () => {
    await h.close();
  });

  const completion = (body: unknown, key: string | null = KEY_A) => h.app.request(...post('/v1/completions', body, key));
  const chat = (body: unknown) => h.app.request(...post('/v1/chat/completions', body));

  test('malformed JSON → 400 invalid_json', async () => {
    await expectError(await completion('{"model": "tiny-a", "prompt": '), 400, { type: 'invalid_request_error', code: 'invalid_json', param: null });
    await expectError(await completion(''), 400, { code: 'invalid_json' });
    await expectError(await completion('[1, 2]'), 400, { type: 'invalid_request_error' });
  });

  test("unknown model → 404 model_not_found (as OpenAI and vLLM answer) with param 'model'; no model → 400", async () => {
    const e = await expectError(await completion({ model: 'gpt-4', prompt: 'hi' }), 404, {
      param: 'model',
      code: 'model_not_found',
      type: 'invalid_request_error',
    });
    assert.equal(e.message, "The model 'gpt-4' does not exist. This server serves 'tiny-a'.");
    await expectError(await chat({ model: 'nope', messages: [{ role: 'user', content: 'hi' }] }), 404, { param: 'model', code: 'model_not_found' });
    await expectError(await h.app.request(...post('/v1/documents', { text: 'x', model: 'nope' })), 404, { param: 'model', code: 'model_not_found' });
    await expectError(await h.app.request(...get('/v1/models/nope')), 404, { param: 'model', code: 'model_not_found' });
    await expectError(await completion({ prompt: 'hi' }), 400, { param: 'model' });
  });

  test('validation messages keep their meaning: they name the parameter, the rule and what was sent', async () => {
    const cases: [Record<string, unknown>, 'chat' | 'completion', string, string, string][] = [
      [{ stop: ['a', 'b', 'c', 'd', 'e'] }, 'completion', 'stop', 'invalid_value', "Invalid value for 'stop': at most 4 stop sequences are allowed, got 5."],
      [{ stop: 5 }, 'completion', 'stop', 'invalid_type', "Invalid type for 'stop': expected a string or an array, but got an integer instead."],
      [{ stop: ['a', 7] }, 'completion', 'stop[1]', 'invalid_type', "Invalid type for 'stop[1]': expected a string, but got an integer instead."],
      [{ messages: undefined }, 'chat', 'messages', 'missing_required_parameter', "Missing required parameter: 'messages'."],
      [{ messages: 'hi' }, 'chat', 'messages', 'invalid_type', "Invalid type for 'messages': expected an array, but got a string instead."],
      [{ messages: [] }, 'chat', 'messages', 'invalid_value', "Invalid value for 'messages': must contain at least one message, got 0."],
      [{ messages: [{ content: 'x' }] }, 'chat', 'messages[0].role', 'missing_required_parameter', "Missing required parameter: 'messages[0].role'."],
      [
        { max_tokens: 1.5 },
        'completion',
        'max_tokens',
        'invalid_type',
        "Invalid type for 'max_tokens': expected an integer, but got a decimal number instead.",
      ],
      [{ max_tokens: '5' }, 'completion', 'max_tokens', 'invalid_type', "Invalid type for 'max_tokens': expected a number, but got a string instead."],
      [{ temperature: 2.5 }, 'completion', 'temperature', 'invalid_value', "Invalid value for 'temperature': must be at most 2, got 2.5."],
      [{ top_p: 0 }, 'completion', 'top_p', 'invalid_value', "Invalid value for 'top_p': must be greater than 0, got 0."],
      [{ logit_bias: { '5': 200 } }, 'completion', 'logit_bias.5', 'invalid_value', "Invalid value for 'logit_bias.5': must be at most 100, got 200."],
      [{ stream: 'yes' }, 'completion', 'stream', 'invalid_type', "Invalid type for 'stream': expected a boolean, but got a string instead."],
      [{ prompt: undefined }, 'completion', 'prompt', 'missing_required_parameter', "Missing required parameter: 'prompt'."],
    ];
    for (const [fields, endpoint, param, code, message] of cases) {
      const base = endpoint === 'chat' ? { model: MODEL_NAME, messages: [{ role: 'user', content: 'hi' }] } : { model: MODEL_NAME, prompt: 'hi' };
      const body = JSON.parse(JSON.stringify({ ...base, ...fields })) as unknown;
      const e = await expectError(await (endpoint === 'chat' ? chat(body) : completion(body)), 400, { param, code });
      assert.equal(e.message, message);
    }
  });

  test('negative, zero, fractional or huge max_tokens → 400 naming the parameter', async () => {
    for (const max_tokens of [-1, 0, 1.5, 65, 1e9]) {
      await expectError(await completion({ model: MODEL_NAME, prompt: 'hi', max_tokens }), 400, { param: 'max_tokens' });
    }
    await expectError(await chat({ model: MODEL_NAME, messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: 1000 }), 400, {
      param: 'max_completion_tokens',
    });
    // within CSA2_MAX_TOKENS but past the model's context (256 tokens): the prompt plus completion do not fit
    await expectError(await completion({ model: MODEL_NAME, prompt: 'x'.repeat(230), max_tokens: 64 }), 400, {
      param: 'max_tokens',
      code: 'context_length_exceeded',
    });
  });

  test('a prompt over the prompt limit → 400 context_length_exceeded', async () => {
    await expectError(await completion({ model: MODEL_NAME, prompt: 'x'.repeat(300) }), 400, { param: 'prompt', code: 'context_length_exceeded' });
    await expectError(await chat({ model: MODEL_NAME, messages: [{ role: 'user', content: 'x'.repeat(300) }] }), 400, {
      param: 'messages',
      code: 'context_length_exceeded',
    });
  });

  test('several prompts, empty prompts and bad token ids → 400 on prompt', async () => {
    const e = await expectError(await completion({ model: MODEL_NAME, prompt: ['one', 'two'] }), 400, {
      param: 'prompt',
      code: 'multiple_prompts_unsupported',
    });
    assert.match(e.message, /2 prompts/);
    await expectError(await completion({ model: MODEL_NAME, prompt: [[1, 2], [3]] }), 400, { param: 'prompt' });
    await expectError(await completion({ model: MODEL_NAME, prompt: [] }), 400, { param: 'prompt' });
    await expectError(await completion({ model: MODEL_NAME, prompt: '' }), 400, { param: 'prompt' });
    await expectError(await completion({ model: MODEL_NAME, prompt: [1, 256] }), 400, { param: 'prompt' });
    await expectError(await completion({ model: MODEL_NAME, prompt: [1, -2] }), 400, { param: 'prompt[1]' });
    await expectError(await completion({ model: MODEL_NAME, prompt: 42 }), 400, { param: 'prompt' });
  });

  test('bad sampling fields and unsupported options → 400 naming the field', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ temperature: -0.1 }, 'temperature'],
      [{ temperature: 2.5 }, 'temperature'],
      [{ top_p: 0 }, 'top_p'],
      [{ top_p: 1.5 }, 'top_p'],
      [{ seed: 1.5 }, 'seed'],
      [{ stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
      [{ stop: [''] }, 'stop'],
      [{ stop: ['x'.repeat(513)] }, 'stop[0]'],
      [{ stop: 'y'.repeat(513) }, 'stop'],
      [{ n: 0 }, 'n'],
      [{ n: 9 }, 'n'],
      [{ n: 1.5 }, 'n'],
      [{ best_of: 2 }, 'best_of'],
      [{ n: 2, best_of: 3 }, 'best_of'],
      [{ logprobs: 6 }, 'logprobs'],
      [{ logprobs: -1 }, 'logprobs'],
      [{ logprobs: true }, 'logprobs'],
      [{ echo: 'yes' }, 'echo'],
      [{ max_tokens: 0, logprobs: 2 }, 'max_tokens'],
      [{ echo: true, max_tokens: -1 }, 'max_tokens'],
      [{ n: 3, seed: Number.MAX_SAFE_INTEGER - 1 }, 'seed'],
      [{ suffix: 'tail' }, 'suffix'],
      [{ prompt_logprobs: 1 }, 'prompt_logprobs'],
      [{ presence_penalty: 2.5 }, 'presence_penalty'],
      [{ frequency_penalty: -3 }, 'frequency_penalty'],
      [{ repetition_penalty: 0 }, 'repetition_penalty'],
      [{ top_k: -2 }, 'top_k'],
      [{ top_k: 1.5 }, 'top_k'],
      [{ min_p: 1.5 }, 'min_p'],
      [{ logit_bias: { '5': 101 } }, 'logit_bias.5'],
      [{ logit_bias: { x: 1 } }, 'logit_bias'],
      [{ logit_bias: { '-1': 1 } }, 'logit_bias'],
      [{ logit_bias: { '256': 1 } }, 'logit_bias'],
      [{ logit_bias: Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [String(i % 256) + '0'.repeat(Math.floor(i / 256)), 1])) }, 'logit_bias'],
      [{ min_tokens: 3 }, 'min_tokens'],
      [{ stop_token_ids: [1] }, 'stop_token_ids'],
      [{ use_beam_search: true }, 'use_beam_search'],
      [{ guided_json: { type: 'object' } }, 'guided_json'],
      [{ include_stop_str_in_output: true }, 'include_stop_str_in_output'],
      [{ stream_options: { include_usage: true } }, 'stream_options'],
      [{ document_id: 'no/slashes' }, 'document_id'],
    ];
    for (const [fields, param] of cases) {
      await expectError(await completion({ model: MODEL_NAME, prompt: 'hi', ...fields }), 400, { param });
    }
    await expectError(await chat({ model: MODEL_NAME, messages: [] }), 400, { param: 'messages' });
    await expectError(await chat({ model: MODEL_NAME, messages: [{ role: 'tool', content: 'x' }] }), 400, { param: 'messages[0].role' });
    await expectError(await chat({ model: MODEL_NAME, messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function' }] }), 400, { param: 'tools' });
    const chatCases: [Record<string, unknown>, string][] = [
      [{ top_logprobs: 2 }, 'top_logprobs'],
      [{ logprobs: false, top_logprobs: 2 }, 'top_logprobs'],
      [{ logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
      [{ logprobs: 1 }, 'logprobs'],
      [{ n: 9 }, 'n'],
      [{ max_completion_tokens: 0 }, 'max_completion_tokens'],
    ];
    for (const [fields, param] of chatCases) {
      await expectError(await chat({ model: MODEL_NAME, messages: [{ role: 'user', content: 'x' }], ...fields }), 400, { param });
    }
  });

  test('logprobs, n, best_of and echo: the messages say the rule and what was sent', async () => {
    const cases: [Record<string, unknown>, 'chat' | 'completion', string, string][] = [
      [{ logprobs: 6 }, 'completion', 'logprobs', "Invalid value for 'logprobs': must be at most 5 (OpenAI's limit for completions), got 6."],
      [{ n: 9 }, 'completion', 'n', "Invalid value for 'n': this server generates at most 8 choices per request, got 9."],
      [{ n: 2, best_of: 3 }, 'completion', 'best_of', "Invalid value for 'best_of': must equal 'n' (2): this server returns every choice it generates, got 3."],
      [{ max_tokens: 0 }, 'completion', 'max_tokens', "Invalid value for 'max_tokens': must be at least 1 (0 only with 'echo'), got 0"],
      [{ top_logprobs: 3 }, 'chat', 'top_logprobs', "Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used."],
      [{ logprobs: true, top_logprobs: 21 }, 'chat', 'top_logprobs', "Invalid value for 'top_logprobs': must be at most 20, got 21."],
    ];
    for (const [fields, endpoint, param, message] of cases) {
      const base = endpoint === 'chat' ? { model: MODEL_NAME, messages: [{ role: 'user', content: 'hi' }] } : { model: MODEL_NAME, prompt: 'hi' };
      const e = await expectError(await (endpoint === 'chat' ? chat({ ...base, ...fields }) : completion({ ...base, ...fields })), 400, {
        param,
        code: 'invalid_value',
      });
      assert.equal(e.message, message);
    }
  });

  test('a body over CSA2_MAX_BODY_BYTES → 413', async () => {
    const big = JSON.stringify({ model: MODEL_NAME, prompt: 'x'.repeat(70_000) });
    await expectError(await completion(big), 413, { code: 'request_too_large' });
    // also when the length is only known while reading (no Content-Length)
    const [url, init] = post('/v1/completions', '');
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new TextEncoder().encode(big));
        c.close();
      },
    });
    await expectError(await h.app.request(url, { ...init, body: stream, duplex: 'half' } as RequestInit), 413);
    await expectError(await h.app.request(...post('/v1/documents', { text: 'y'.repeat(70_000) })), 413);
  });

  test('a missing or bad API key → 401 (before the body is looked at)', async () => {
    await expectError(await completion({ model: MODEL_NAME, prompt: 'hi' }, null), 401, { code: 'missing_api_key' });
    await expectError(await completion({ model: MODEL_NAME, prompt: 'hi' }, 'sk-not-a-key-at-all'), 401, { code: 'invalid_api_key' });
    await expectError(await completion('not json', 'sk-not-a-key-at-all'), 401);
    const [url, init] = post('/v1/completions', {}, null);
    const basic = await h.app.request(url, { ...init, headers: { ...(init.headers as Record<string, string>), authorization: `Basic ${KEY_A}` } });
    await expectError(basic, 401, { code: 'invalid_api_key' });
    const res = await h.app.request(...get('/v1/models', null));
    assert.equal(res.status, 401);
    assert.equal(res.headers.get('www-authenticate'), 'Bearer');
  });

  test("another tenant's document → 404; a document still encoding → 409", async () => {
    await writeManifest(h, TENANT_A, 'private-doc', 10);
    await expectError(await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'q', document_id: 'private-doc' }, KEY_B)), 404, {
      param: 'document_id',
      code: 'document_not_found',
    });
    await expectError(await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'q', document_id: 'never-posted' })), 404, {
      param: 'document_id',
    });
    const data: PrefillJob = {
      v: 1,
      kind: 'document',
      tenant: TENANT_A,
      documentId: 'pending-doc',
      model: MODEL_NAME,
      input: { tokenIds: [1, 2, 3] },
      acceptedAtMs: Date.now(),
    };
    await h.deps.queues.prefill.add(PREFILL_JOB_NAME, data, { jobId: documentJobId(TENANT_A, 'pending-doc') });
    const e = await expectError(await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'q', document_id: 'pending-doc' })), 409, {
      param: 'document_id',
      code: 'document_not_ready',
    });
    assert.match(e.message, /queued/);
    // a document prompt + its document must fit the prompt limit (255 tokens)
    await writeManifest(h, TENANT_A, 'big-doc', 250);
    await expectError(await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'x'.repeat(10), document_id: 'big-doc' })), 400, {
      code: 'context_length_exceeded',
    });
    await h.deps.queues.prefill.obliterate({ force: true });
  });

  test('unknown URLs → 404 in the OpenAI shape', async () => {
    await expectError(await h.app.request(...get('/v1/nothing-here')), 404, { code: 'unknown_url' });
    await expectError(await h.app.request(...get('/v1/models/gpt-4')), 404, { code: 'model_not_found' });
  });

  test('GET /v1/models lists the one served model', async () => {
    const res = await h.app.request(...get('/v1/models'));
    assert.equal(res.status, 200);
    const body = (await res.json()) as { object: string; data: { id: string; object: string; owned_by: string }[] };
    assert.equal(body.object, 'list');
    assert.deepEqual(
      body.data.map((m) => [m.id, m.object]),
      [[MODEL_NAME, 'model']],
    );
    const one = await h.app.request(...get(`/v1/models/${MODEL_NAME}`));
    assert.equal(((await one.json()) as { id: string }).id, MODEL_NAME);
  });

  test('none of the refused requests above was enqueued', async () => {
    const jobs = await h.deps.queues.decode.getJobs(['wait', 'prioritized', 'delayed', 'active', 'completed', 'failed']);
    assert.deepEqual(
      jobs.map((j) => j.id),
      [],
    );
  });

  test('a decode backlog at CSA2_MAX_QUEUE_DEPTH → 429 with Retry-After, and nothing is enqueued', async () => {
    const filler = (i: number): DecodeJob => ({
      v: 1,
      requestId: `filler-${i}`,
      tenant: TENANT_A,
      model: MODEL_NAME,
      promptIds: [1],
      documentId: null,
      sampling: { temperature: 0, topP: 1, seed: 1 },
      maxTokens: 1,
      stop: [],
      ignoreEos: false,
      replayTokens: null,
      acceptedAtMs: Date.now(),
    });
    for (let i = 0; i < 3; i++) await h.deps.queues.decode.add(DECODE_JOB_NAME, filler(i), { jobId: `filler-${i}` });
    const res = await completion({ model: MODEL_NAME, prompt: 'hi' });
    assert.equal(res.headers.get('retry-after'), '1');
    const full = await expectError(res, 429, { type: 'rate_limit_error', code: 'queue_full' });
    assert.equal(full.message, 'The server is overloaded: 3 requests are waiting for the decode workers. Please retry shortly.');
    assert.equal(await h.deps.queues.decode.count(), 3);
    await expectError(await h.app.request(...post('/v1/documents', { documents: [{ text: 'a' }, { text: 'b' }, { text: 'c' }, { text: 'd' }] })), 429);
    await h.deps.queues.decode.obliterate({ force: true });
  });
});
