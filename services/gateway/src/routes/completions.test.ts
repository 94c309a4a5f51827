import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  DECODE_JOB_NAME,
  cancelKey,
  DEFAULT_DECODE_JOB_OPTIONS,
  UnrecoverableError,
  formatFailure,
  promptDocumentId,
  requestDecodeJobId,
  type DecodeJob,
  type PromptPrefillJob,
} from '@csa2/jobs';
import { manifestObjectKey } from '@csa2/artifacts';
import {
  KEY_A,
  KEY_B,
  MODEL_NAME,
  TENANT_A,
  fakeDecoder,
  fakeEncoder,
  finalEntry,
  parseSse,
  post,
  startHarness,
  tokenEntries,
  waitFor,
  writeEntries,
  writeManifest,
  type Harness,
} from '../testing/harness.js';

/** What the fake decoder does with a job, chosen by the test through the prompt's first word. */
type Script = (job: DecodeJob) => Promise<void>;

describe('completions and chat completions against a fake decoder', () => {
  let h: Harness;
  const jobs: DecodeJob[] = [];
  const prefillJobs: PromptPrefillJob[] = [];
  const scripts = new Map<string, Script>();
  const logLines: Record<string, unknown>[] = [];

  before(async () => {
    h = await startHarness({}, { logLines });
    fakeDecoder(h, async (job) => {
      jobs.push(job.data);
      // a long prompt's decode job holds its last token only: its prefill job has the rest
      const prefix = prefillJobs.find((p) => p.requestId === job.data.requestId)?.tokenIds ?? [];
      const prompt = Buffer.from([...prefix, ...job.data.promptIds].filter((id) => id < 256)).toString('latin1');
      const script = [...scripts.entries()].find(([word]) => prompt.includes(word))?.[1];
      if (script !== undefined) {
        await script(job.data);
        return;
      }
      const entries = tokenEntries('Hello');
      await writeEntries(h.redis, job.data.requestId, [...entries, finalEntry(job.data, entries.length, { finishReason: 'length' })]);
    });
    // A fake encoder: writes the prompt's artifact manifest and hands the decode job on, as the real one does.
    fakeEncoder(h, async (job) => {
      const data = job.data;
      if (data.kind !== 'prompt') throw new UnrecoverableError('unexpected document job');
      if (data.tokenIds === undefined) throw new UnrecoverableError('the test prompts are short enough to travel inline');
      prefillJobs.push(data);
      if (Buffer.from(data.tokenIds).toString('latin1').startsWith('prefill-fail'))
        throw new UnrecoverableError(formatFailure('artifact-corrupt', 'internal error in the encoder'));
      if (Buffer.from(data.tokenIds).toString('latin1').startsWith('slow-prefill')) {
        await job.updateProgress({ tokensDone: 64, tokensTotal: data.tokenIds.length });
        await new Promise((r) => setTimeout(r, 700));
      }
      await writeManifest(h, data.tenant, promptDocumentId(data.requestId), data.tokenIds.length);
      await h.deps.queues.decode.add(DECODE_JOB_NAME, data.decode, { ...DEFAULT_DECODE_JOB_OPTIONS, jobId: requestDecodeJobId(data.requestId) });
      return { documentId: promptDocumentId(data.requestId), tokens: data.tokenIds.length, bytesWritten: 1234, artifactBytes: 1234, reusedTokens: 0 };
    });
  });
  after(async () => {
    await h.close();
  });

  test('a non-streamed completion answers the whole text with usage, and the job carries the request', async () => {
    const res = await h.app.request(
      ...post('/v1/completions', { model: MODEL_NAME, prompt: 'Say hi', max_tokens: 5, temperature: 0.5, top_p: 0.9, seed: 7, stop: ['\n'] }),
    );
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /application\/json/);
    const body = (await res.json()) as Record<string, unknown>;
    assert.equal(body['object'], 'text_completion');
    assert.match(String(body['id']), /^cmpl-[A-Za-z0-9_-]+$/);
    assert.equal(body['model'], MODEL_NAME);
    assert.equal(typeof body['created'], 'number');
    assert.deepEqual(body['choices'], [{ index: 0, text: 'Hello', logprobs: null, finish_reason: 'length' }]);
    assert.deepEqual(body['usage'], { prompt_tokens: 6, completion_tokens: 5, total_tokens: 11, prompt_tokens_details: { cached_tokens: 0 } });
    const job = jobs.find((j) => j.requestId === body['id']);
    assert.ok(job, 'the decode job was enqueued under the response id');
    assert.deepEqual(job.promptIds, [...Buffer.from('Say hi')]);
    assert.deepEqual(job.sampling, { temperature: 0.5, topP: 0.9, seed: 7 });
    assert.equal(job.maxTokens, 5);
    assert.deepEqual(job.stop, ['\n']);
    assert.equal(job.documentId, null);
    assert.equal(job.tenant, TENANT_A);
  });

  test('top_k, min_p, repetition/presence/frequency penalties and logit_bias reach the job (never ignored)', async () => {
    const res = await h.app.request(
      ...post('/v1/chat/completions', {
        model: MODEL_NAME,
        messages: [{ role: 'user', content: 'sampling options' }],
        seed: 3,
        top_k: 5,
        min_p: 0.1,
        repetition_penalty: 1.2,
        presence_penalty: -0.5,
        frequency_penalty: 2,
        logit_bias: { '65': -100, '0': 5.5 },
      }),
    );
    assert.equal(res.status, 200, await res.clone().text());
    const { id } = (await res.json()) as { id: string };
    const job = jobs.find((j) => j.requestId === id);
    assert.deepEqual(job?.sampling, {
      temperature: 1,
      topP: 1,
      seed: 3,
      topK: 5,
      minP: 0.1,
      repetitionPenalty: 1.2,
      presencePenalty: -0.5,
      frequencyPenalty: 2,
      logitBias: [
        [0, 5.5],
        [65, -100],
      ],
    });
    // their no-op values (top_k -1 as vLLM's "off") leave the job's sampling as it was
    const plain = await h.app.request(
      ...post('/v1/completions', {
        model: MODEL_NAME,
        prompt: 'no-op options',
        seed: 4,
        top_k: -1,
        min_p: 0,
        repetition_penalty: 1,
        presence_penalty: 0,
        frequency_penalty: 0,
        logit_bias: {},
      }),
    );
    const plainId = ((await plain.json()) as { id: string }).id;
    const plainJob = jobs.find((j) => j.requestId === plainId);
    assert.deepEqual(plainJob?.sampling, { temperature: 1, topP: 1, seed: 4 });
  });

  test('a streamed completion is framed as OpenAI SSE: data chunks, a finish chunk, then [DONE]', async () => {
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: [72, 105], stream: true }));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/event-stream; charset=utf-8');
    const raw = await res.text();
    const events = parseSse(raw);
    assert.equal(events.at(-1), '[DONE]');
    assert.ok(raw.endsWith('data: [DONE]\n\n'));
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Record<string, any>);
    assert.equal(chunks.length, 6, 'five text chunks and one finish chunk');
    for (const c of chunks) {
      assert.equal(c['object'], 'text_completion');
      assert.equal(c['model'], MODEL_NAME);
      assert.equal(c['id'], chunks[0]?.['id']);
      assert.equal('usage' in c, false, 'no usage without include_usage');
    }
    assert.equal(
      chunks
        .slice(0, 5)
        .map((c) => c['choices'][0].text)
        .join(''),
      'Hello',
    );
    assert.deepEqual(
      chunks.slice(0, 5).map((c) => c['choices'][0].finish_reason),
      [null, null, null, null, null],
    );
    assert.deepEqual(chunks[5]?.['choices'], [{ index: 0, text: '', logprobs: null, finish_reason: 'length' }]);
    const job = jobs.find((j) => j.requestId === chunks[0]?.['id']);
    assert.deepEqual(job?.promptIds, [72, 105], 'token-id prompts are passed as given');
    assert.equal(job?.maxTokens, 16, 'CSA2_DEFAULT_MAX_TOKENS when max_tokens is absent');
  });

  test('streamed chat: role chunk, content deltas, finish chunk, then a usage chunk with empty choices (include_usage)', async () => {
    scripts.set('usage-chat', async (job) => {
      await writeEntries(h.redis, job.requestId, [...tokenEntries('Hi!'), finalEntry(job, 3, { cachedTokens: 0, text: '' })]);
    });
    const res = await h.app.request(
      ...post('/v1/chat/completions', {
        model: MODEL_NAME,
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: [{ type: 'text', text: 'usage-chat' }] },
        ],
        stream: true,
        stream_options: { include_usage: true },
      }),
    );
    assert.equal(res.status, 200);
    const events = parseSse(await res.text());
    assert.equal(events.at(-1), '[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Record<string, any>);
    assert.ok(chunks.every((c) => c['object'] === 'chat.completion.chunk'));
    assert.match(String(chunks[0]?.['id']), /^chatcmpl-/);
    assert.deepEqual(chunks[0]?.['choices'][0].delta, { role: 'assistant', content: '' });
    const deltas = chunks.slice(1, -2).map((c) => c['choices'][0].delta.content as string);
    assert.equal(deltas.join(''), 'Hi!');
    const finish = chunks.at(-2);
    assert.deepEqual(finish?.['choices'], [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]);
    for (const c of chunks.slice(0, -1)) assert.equal(c['usage'], null, 'every chunk but the last carries usage: null');
    const usage = chunks.at(-1);
    assert.deepEqual(usage?.['choices'], []);
    const job = jobs.find((j) => j.requestId === usage?.['id']);
    assert.ok(job);
    assert.deepEqual(job.promptIds, [...Buffer.from('System: Be brief.\nUser: usage-chat\nAssistant:')], "the tokenizer's chat template");
    assert.deepEqual(usage?.['usage'], {
      prompt_tokens: job.promptIds.length,
      completion_tokens: 3,
      total_tokens: job.promptIds.length + 3,
      prompt_tokens_details: { cached_tokens: 0 },
    });
  });

  test('non-streamed chat answers a chat.completion whose content includes the text released by the final entry', async () => {
    scripts.set('tail-text', async (job) => {
      await writeEntries(h.redis, job.requestId, [...tokenEntries('ab'), finalEntry(job, 3, { text: 'c' })]);
    });
    const res = await h.app.request(
      ...post('/v1/chat/completions', { model: MODEL_NAME, messages: [{ role: 'user', content: 'tail-text' }], max_completion_tokens: 3 }),
    );
    assert.equal(res.status, 200);
    const body = (await res.json()) as Record<string, any>;
    assert.equal(body['object'], 'chat.completion');
    assert.deepEqual(body['choices'], [{ index: 0, message: { role: 'assistant', content: 'abc', refusal: null }, logprobs: null, finish_reason: 'stop' }]);
    assert.equal(jobs.find((j) => j.requestId === body['id'])?.maxTokens, 3);
  });

  test('duplicate token indexes in the stream (a retried job) are relayed once', async () => {
    scripts.set('dup-index', async (job) => {
      await writeEntries(h.redis, job.requestId, [...tokenEntries('xy'), ...tokenEntries('y', 1), ...tokenEntries('z', 2), finalEntry(job, 3)]);
    });
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'dup-index' }));
    assert.equal(((await res.json()) as Record<string, any>)['choices'][0].text, 'xyz');
  });

  /** Worker messages full of internals, as artifact and store failures produce them. */
  const CORRUPT = 'chunk tenants/tenant-a/chunks/3f9a0c/00000000.bin: checksum mismatch at byte 1048576 (stored 1f2e3d4c, computed 9a8b7c6d; model 7d1e5c0b9f)';
  const STORE_DOWN = 'GET s3://csa2-artifacts/prod/tenants/tenant-a/manifests/doc.json: connect ECONNREFUSED 10.0.3.7:9000';

  /** Asserts the worker's text reached no client and went to the gateway's log with the request id. */
  function assertInternalsStayInTheLog(clientText: string, internal: string, reqId: string): void {
    for (const piece of internal.split(/[ :()]+/).filter((w) => w.length >= 8))
      assert.ok(!clientText.includes(piece), `the client saw '${piece}': ${clientText}`);
    const line = logLines.find((l) => l['reqId'] === reqId && String(l['err']).includes(internal));
    assert.ok(line !== undefined, `the gateway logged the worker's message with reqId ${reqId}`);
  }

  test('an error entry becomes an OpenAI error with its code, status, public message and request id; the worker text only in the log (non-streamed)', async () => {
    scripts.set('bad-input', async (job) => {
      await writeEntries(h.redis, job.requestId, [{ kind: 'error', code: 'artifact-corrupt', message: CORRUPT }]);
    });
    scripts.set('store-down', async (job) => {
      await writeEntries(h.redis, job.requestId, [...tokenEntries('a'), { kind: 'error', code: 'store-unavailable', message: STORE_DOWN }]);
    });
    const bad = await h.app.request(
      ...post('/v1/completions', { model: MODEL_NAME, prompt: 'bad-input' }, undefined, {
        headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY_A}`, 'x-request-id': 'trace-corrupt-1' },
      }),
    );
    assert.equal(bad.status, 500);
    assert.equal(bad.headers.get('x-request-id'), 'trace-corrupt-1');
    const badText = await bad.text();
    assert.deepEqual(JSON.parse(badText), {
      error: {
        message: 'A stored artifact this request needs is damaged. (request id: trace-corrupt-1)',
        type: 'server_error',
        param: null,
        code: 'artifact_corrupt',
      },
    });
    assertInternalsStayInTheLog(badText, CORRUPT, 'trace-corrupt-1');
    const down = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'store-down' }));
    assert.equal(down.status, 503);
    const reqId = down.headers.get('x-request-id') ?? '';
    assert.match(reqId, /^req_[0-9a-f]{32}$/, 'generated when the client sent none');
    const downText = await down.text();
    assert.deepEqual(JSON.parse(downText)['error'], {
      message: `The artifact store is unavailable. Please retry shortly. (request id: ${reqId})`,
      type: 'server_error',
      param: null,
      code: 'store_unavailable',
    });
    assertInternalsStayInTheLog(downText, STORE_DOWN, reqId);
  });

  test('an error entry mid-stream becomes an error event (public message, request id) and the stream ends without [DONE]', async () => {
    const res = await h.app.request(...post('/v1/chat/completions', { model: MODEL_NAME, messages: [{ role: 'user', content: 'store-down' }], stream: true }));
    assert.equal(res.status, 200);
    const reqId = res.headers.get('x-request-id') ?? '';
    assert.match(reqId, /^req_/, 'SSE responses carry the request id too');
    const raw = await res.text();
    const events = parseSse(raw);
    assert.notEqual(events.at(-1), '[DONE]');
    const last = JSON.parse(events.at(-1) ?? 'null') as Record<string, any>;
    assert.deepEqual(last, {
      error: {
        message: `The artifact store is unavailable. Please retry shortly. (request id: ${reqId})`,
        type: 'server_error',
        param: null,
        code: 'store_unavailable',
      },
    });
    assert.equal((JSON.parse(events[1] ?? 'null') as Record<string, any>)['choices'][0].delta.content, 'a', 'the text before the error was relayed');
    assertInternalsStayInTheLog(raw, STORE_DOWN, reqId);
  });

  test('a job that fails for good without writing its stream ends the request with its failure (code, public message)', async () => {
    scripts.set('fails-hard', async () => {
      throw new UnrecoverableError(formatFailure('input-invalid', 'token id 999 is out of range (key tenants/tenant-a/x)'));
    });
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'fails-hard' }));
    assert.equal(res.status, 400);
    const reqId = res.headers.get('x-request-id') ?? '';
    assert.deepEqual(((await res.json()) as Record<string, any>)['error'], {
      message: `The request is invalid for this model. (request id: ${reqId})`,
      type: 'invalid_request_error',
      param: null,
      code: 'input_invalid',
    });
    assert.ok(
      logLines.some((l) => l['reqId'] === reqId && String(l['err']).includes('token id 999')),
      'the worker message is in the log',
    );
    const failed = jobs.at(-1);
    assert.ok(failed !== undefined);
    await waitFor('the cancel key of a request answered with an error', async () =>
      (await h.redis.exists(cancelKey(failed.requestId))) === 1 ? true : undefined,
    );
  });

  test('a document completion: the job names the document, usage reports cached tokens', async () => {
    await writeManifest(h, TENANT_A, 'handbook', 40);
    scripts.set('doc-question', async (job) => {
      await writeEntries(h.redis, job.requestId, [...tokenEntries('ok'), finalEntry(job, 2, { promptTokens: 40 + job.promptIds.length, cachedTokens: 40 })]);
    });
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: ' doc-question', document_id: 'handbook' }));
    assert.equal(res.status, 200);
    const body = (await res.json()) as Record<string, any>;
    const job = jobs.find((j) => j.requestId === body['id']);
    assert.equal(job?.documentId, 'handbook');
    assert.deepEqual(job?.promptIds, [...Buffer.from(' doc-question')]);
    assert.deepEqual(body['usage'], { prompt_tokens: 53, completion_tokens: 2, total_tokens: 55, prompt_tokens_details: { cached_tokens: 40 } });
  });

  test('a document whose artifact lost a chunk: 500 artifact_missing, its status says so, posting it again re-encodes it', async () => {
    await writeManifest(h, TENANT_A, 'damaged', 40);
    scripts.set('lost-chunk', async (job) => {
      await writeEntries(h.redis, job.requestId, [
        { kind: 'error', code: 'artifact-missing', message: 'document damaged of tenant tenant-a: object tenants/… is missing from the store' },
      ]);
    });
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: ' lost-chunk', document_id: 'damaged' }));
    assert.equal(res.status, 500);
    assert.equal(((await res.json()) as Record<string, any>)['error'].code, 'artifact_missing');
    const status = (await (
      await h.app.request(`http://gateway.test/v1/documents/damaged`, { headers: { authorization: `Bearer ${KEY_A}` } })
    ).json()) as Record<string, unknown>;
    assert.equal(status['status'], 'failed');
    assert.equal(status['error_code'], 'artifact_missing');
    assert.match(String(status['reason']), /missing from the object store/);

    const jobsBefore = jobs.length;
    const again = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: ' anything', document_id: 'damaged' }));
    assert.equal(again.status, 500, 'refused at once: a storage error, not 409');
    assert.equal(((await again.json()) as Record<string, any>)['error'].code, 'artifact_missing');
    assert.equal(jobs.length, jobsBefore, 'nothing was enqueued');

    const repost = await h.app.request(...post('/v1/documents', { id: 'damaged', text: 'the same text' }));
    assert.equal(repost.status, 202);
    assert.equal(((await repost.json()) as Record<string, unknown>)['status'], 'queued');
    assert.equal(await h.store.head(manifestObjectKey(TENANT_A, 'damaged')), null, 'the damaged manifest is gone until the encoder writes it again');
  });

  test("another tenant's document is unknown (404 naming document_id)", async () => {
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'x', document_id: 'handbook' }, KEY_B));
    assert.equal(res.status, 404);
    assert.deepEqual(((await res.json()) as Record<string, any>)['error'], {
      message: "No document found with id 'handbook'",
      type: 'not_found_error',
      param: 'document_id',
      code: 'document_not_found',
    });
  });

  test('a prompt at the prefill threshold goes to the prefill queue as a prompt job that hands its decode job on', async () => {
    const prompt = 'long '.repeat(20); // 100 tokens = CSA2_PREFILL_THRESHOLD_TOKENS
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt, max_tokens: 4 }));
    assert.equal(res.status, 200);
    const body = (await res.json()) as Record<string, any>;
    assert.equal(body['choices'][0].text, 'Hello');
    const pj = prefillJobs.find((j) => j.requestId === body['id']);
    assert.ok(pj, 'a prompt prefill job was enqueued');
    assert.deepEqual(pj.tokenIds, [...Buffer.from(prompt)].slice(0, -1), 'the prefix to encode: all but the last token');
    assert.deepEqual(pj.decode.promptIds, [...Buffer.from(prompt)].slice(-1));
    assert.equal(pj.decode.documentId, promptDocumentId(pj.requestId));
    assert.equal(pj.decode.maxTokens, 4);
    const decoded = jobs.find((j) => j.requestId === body['id']);
    assert.equal(decoded?.documentId, promptDocumentId(pj.requestId), 'the decoder got the handed-on job');
    await waitFor('the prompt artifact manifest to be removed', async () =>
      (await h.store.head(manifestObjectKey(TENANT_A, promptDocumentId(pj.requestId)))) === null ? true : undefined,
    );
  });

  test("a long prompt after a document goes through the encoder too: the document is its artifact's prefix, the decoder gets one token", async () => {
    await writeManifest(h, TENANT_A, 'prefix-doc', 40);
    const prompt = ' question '.repeat(12); // 120 tokens ≥ CSA2_PREFILL_THRESHOLD_TOKENS
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt, document_id: 'prefix-doc', max_tokens: 4 }));
    assert.equal(res.status, 200);
    const body = (await res.json()) as Record<string, any>;
    const pj = prefillJobs.find((j) => j.requestId === body['id']);
    assert.ok(pj, 'a prompt prefill job was enqueued');
    assert.equal(pj.prefixDocumentId, 'prefix-doc');
    assert.deepEqual(pj.tokenIds, [...Buffer.from(prompt)].slice(0, -1));
    assert.deepEqual(pj.decode.promptIds, [...Buffer.from(prompt)].slice(-1));
    assert.equal(pj.decode.documentId, promptDocumentId(pj.requestId));
  });

  test('a shorter prompt does not touch the prefill queue', async () => {
    const before = prefillJobs.length;
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'x'.repeat(99) }));
    assert.equal(res.status, 200);
    assert.equal(prefillJobs.length, before);
  });

  test("a quiet stream carries progress comments: the prefill's tokens, then the decode job, and a job whose worker died (lock gone)", async () => {
    let release: () => void = () => undefined;
    scripts.set('slow-decode', async (job) => {
      await new Promise<void>((resolve) => (release = resolve));
      await writeEntries(h.redis, job.requestId, [...tokenEntries('ok'), finalEntry(job, 2)]);
    });
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: `slow-prefill slow-decode ${'z'.repeat(100)}`, stream: true }));
    assert.equal(res.status, 200);
    const body = res.text();
    // the decode job runs and holds: its lock disappears as when the worker died and the lock expired
    const job = await waitFor('the decode job to be active', async () =>
      jobs.find((d) =>
        prefillJobs.some(
          (p) =>
            p.requestId === d.requestId &&
            Buffer.from(p.tokenIds ?? [])
              .toString('latin1')
              .startsWith('slow-prefill'),
        ),
      ),
    );
    await new Promise((r) => setTimeout(r, 500)); // a progress poll or two while it is active
    await h.redis.del(h.deps.queues.decode.toKey(`${requestDecodeJobId(job.requestId)}:lock`));
    await new Promise((r) => setTimeout(r, 500));
    release();
    const raw = await body;
    const progress = raw
      .split('\n\n')
      .filter((e) => e.startsWith(': progress '))
      .map((e) => JSON.parse(e.slice(': progress '.length)) as Record<string, unknown>);
    assert.ok(
      progress.some((p) => p['stage'] === 'prefill' && p['state'] === 'active' && p['tokens_done'] === 64),
      JSON.stringify(progress),
    );
    assert.ok(
      progress.some((p) => p['stage'] === 'decode' && p['state'] === 'active' && p['tokens'] === 0 && p['attempt'] === 1 && p['stalled'] === undefined),
      JSON.stringify(progress),
    );
    assert.ok(
      progress.some((p) => p['stage'] === 'decode' && p['state'] === 'active' && p['stalled'] === true),
      JSON.stringify(progress),
    );
    assert.deepEqual(parseSse(raw).at(-1), '[DONE]');
  });

  test("a long prompt's prefill job that fails for good ends the request with its failure", async () => {
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: `prefill-fail ${'y'.repeat(120)}`, stream: true }));
    assert.equal(res.status, 200);
    const events = parseSse(await res.text());
    assert.deepEqual(JSON.parse(events.at(-1) ?? 'null'), {
      error: {
        message: `A stored artifact this request needs is damaged. (request id: ${res.headers.get('x-request-id') ?? ''})`,
        type: 'server_error',
        param: null,
        code: 'artifact_corrupt',
      },
    });
  });
});
