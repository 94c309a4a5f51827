/**
 * x-request-id: a valid client value is echoed, a missing one generated, an
 * invalid one refused naming the header; the id is on every response (errors, probes, 404s), in the
 * jobs the request makes, and on every gateway log line logged for the request.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { documentJobId, parseDecodeJob, requestPrefillJobId, type DecodeJob, type PromptPrefillJob } from '@csa2/jobs';
import { KEY_A, MODEL_NAME, TENANT_A, fakeDecoder, finalEntry, get, post, startHarness, tokenEntries, writeEntries, type Harness } from '../testing/harness.js';

describe('x-request-id', () => {
  let h: Harness;
  const logLines: Record<string, unknown>[] = [];
  const jobs: DecodeJob[] = [];

  before(async () => {
    h = await startHarness({}, { logLines });
    fakeDecoder(h, async (job) => {
      jobs.push(job.data);
      await writeEntries(h.redis, job.data.requestId, [...tokenEntries('ok'), finalEntry(job.data, 2)]);
    });
  });
  after(async () => {
    await h.close();
  });

  const withId = (id: string, init: RequestInit = {}): RequestInit => ({
    ...init,
    headers: { ...(init.headers as Record<string, string>), 'x-request-id': id },
  });

  test('a valid id is echoed and reaches the decode job; every gateway line of the request carries it', async () => {
    const [url, init] = post('/v1/completions', { model: MODEL_NAME, prompt: 'trace me', max_tokens: 2 });
    const id = 'Trace-01:ab.cd=ef+gh/ij_kl';
    const res = await h.app.request(url, withId(id, init));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-request-id'), id);
    const body = (await res.json()) as { id: string };
    const job = jobs.find((j) => j.requestId === body.id);
    assert.equal(job?.reqId, id, 'the job carries the x-request-id');
    const mine = logLines.filter((l) => l['reqId'] === id);
    assert.ok(
      mine.some((l) => l['msg'] === 'request' && l['path'] === '/v1/completions'),
      'the request line carries it',
    );
    assert.ok(
      logLines.filter((l) => l['msg'] === 'request').every((l) => typeof l['reqId'] === 'string'),
      'every request line has one',
    );
  });

  test('without one, an id is generated (req_ + 32 hex), different per request, on every kind of response', async () => {
    const ids = new Set<string>();
    for (const [url, init] of [
      get('/healthz', null),
      get('/v1/models'),
      get('/v1/models', null),
      get('/v1/nowhere'),
      post('/v1/completions', { model: MODEL_NAME }),
    ]) {
      const res = await h.app.request(url, init);
      const id = res.headers.get('x-request-id') ?? '';
      assert.match(id, /^req_[0-9a-f]{32}$/, `${init.method ?? 'GET'} ${url} → ${res.status}`);
      ids.add(id);
    }
    assert.equal(ids.size, 5);
    // an empty header counts as absent
    const blank = await h.app.request(
      ...(() => {
        const [url, init] = get('/healthz', null);
        return [url, withId('', init)] as const;
      })(),
    );
    assert.match(blank.headers.get('x-request-id') ?? '', /^req_/);
  });

  test('an invalid id (too long, bad characters) → 400 invalid_request_id naming the header; the answer carries a fresh id', async () => {
    for (const bad of ['x'.repeat(129), 'has space', 'semi;colon', 'ünïcode', '{"json":1}']) {
      const [url, init] = get('/v1/models');
      const res = await h.app.request(url, withId(bad, init));
      assert.equal(res.status, 400, bad);
      const body = (await res.json()) as { error: { message: string; code: string; type: string } };
      assert.equal(body.error.code, 'invalid_request_id');
      assert.equal(body.error.type, 'invalid_request_error');
      assert.match(body.error.message, /^Invalid 'x-request-id' header: it must be at most 128 characters from A-Z a-z 0-9 \. _ : = \+ \/ -/);
      const fresh = res.headers.get('x-request-id') ?? '';
      assert.match(fresh, /^req_[0-9a-f]{32}$/);
      assert.ok(body.error.message.includes(fresh), 'the message quotes the id to report');
    }
    const [url, init] = get('/v1/models');
    assert.equal((await h.app.request(url, withId('x'.repeat(128), init))).status, 200, '128 characters is fine');
  });

  test('long prompts and documents: the prefill jobs (and the decode job a prompt job hands on) carry the id', async () => {
    const [url, init] = post('/v1/completions', { model: MODEL_NAME, prompt: 'p'.repeat(150), max_tokens: 2, stream: true });
    const res = await h.app.request(url, withId('trace-long-prompt', init));
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read(); // the stream started; the prefill job is enqueued
    await reader.cancel();
    const [prefill] = await h.deps.queues.prefill.getJobs(['wait', 'prioritized', 'delayed', 'active']);
    const data = prefill?.data as PromptPrefillJob | undefined;
    assert.equal(prefill?.id, requestPrefillJobId(data?.requestId ?? ''));
    assert.equal(data?.reqId, 'trace-long-prompt');
    assert.equal(data?.decode.reqId, 'trace-long-prompt');
    const [durl, dinit] = post('/v1/documents', { id: 'traced-doc', text: 'abc' }, KEY_A);
    assert.equal((await h.app.request(durl, withId('trace-doc', dinit))).status, 202);
    const doc = await h.deps.queues.prefill.getJob(documentJobId(TENANT_A, 'traced-doc'));
    assert.equal((doc?.data as { reqId?: string } | undefined)?.reqId, 'trace-doc');
    await h.deps.queues.prefill.obliterate({ force: true });
  });

  test('jobs without a reqId (enqueued by an older gateway) still parse', async () => {
    const job: DecodeJob = {
      v: 1,
      requestId: 'old-1',
      tenant: TENANT_A,
      model: MODEL_NAME,
      promptIds: [1],
      documentId: null,
      sampling: { temperature: 0, topP: 1, seed: 0 },
      maxTokens: 1,
      stop: [],
      ignoreEos: false,
      replayTokens: null,
      acceptedAtMs: Date.now(),
    };
    assert.equal(parseDecodeJob(job).reqId, undefined);
    assert.throws(() => parseDecodeJob({ ...job, reqId: 'bad id' }), /reqId/);
  });
});
