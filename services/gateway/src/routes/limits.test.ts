import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { MODEL_NAME, fakeDecoder, finalEntry, post, startHarness, tokenEntries, writeEntries, type Harness } from '../testing/harness.js';
import { formatResetDuration } from '../key-limiter.js';

const RPM_KEY = 'sk-limit-rpm-01';
const TPM_KEY = 'sk-limit-tpm-01';
const CONC_KEY = 'sk-limit-conc-1';
const DOCS_KEY = 'sk-limit-docs-1';
const FREE_KEY = 'sk-limit-free-1';

describe('per-key limits: 429 with Retry-After and x-ratelimit-* headers', () => {
  let h: Harness;
  let holdRelease: (() => void) | null = null;

  before(async () => {
    h = await startHarness({
      CSA2_API_KEYS: `${RPM_KEY}:t-rpm;rpm=3,${TPM_KEY}:t-tpm;tpm=100,${CONC_KEY}:t-conc;concurrency=1,${DOCS_KEY}:t-docs;queued_documents=2,${FREE_KEY}:t-free`,
    });
    fakeDecoder(h, async (job) => {
      if (Buffer.from(job.data.promptIds).toString('latin1').includes('hold')) await new Promise<void>((resolve) => (holdRelease = resolve));
      await writeEntries(h.redis, job.data.requestId, [...tokenEntries('ok'), finalEntry(job.data, 2)]);
    });
  });
  after(async () => {
    holdRelease?.();
    await h.close();
  });

  const complete = (key: string, body: Record<string, unknown> = {}) =>
    h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'hi', max_tokens: 4, ...body }, key));
  const errorOf = async (res: Response) => ((await res.json()) as { error: { code: string; message: string } }).error;

  test('requests per minute: answers carry the remaining count; the one past the limit gets 429 and Retry-After', async () => {
    const remaining: (string | null)[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await complete(RPM_KEY);
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-ratelimit-limit-requests'), '3');
      remaining.push(res.headers.get('x-ratelimit-remaining-requests'));
      await res.text();
    }
    assert.deepEqual(remaining, ['2', '1', '0']);
    const refused = await complete(RPM_KEY);
    assert.equal(refused.status, 429);
    assert.equal((await errorOf(refused)).code, 'rate_limit_exceeded');
    const retryAfter = Number(refused.headers.get('retry-after'));
    assert.ok(retryAfter >= 1 && retryAfter <= 20, `Retry-After ${retryAfter}: one request refills in 20 s`);
    assert.equal(refused.headers.get('x-ratelimit-remaining-requests'), '0');
    assert.match(refused.headers.get('x-ratelimit-reset-requests') ?? '', /^\d+(ms|s|m\d+s)$/);
    // other keys are not affected
    assert.equal((await complete(FREE_KEY)).status, 200);
  });

  test('tokens per minute count prompt + max_tokens; a request larger than the limit can never pass', async () => {
    const first = await complete(TPM_KEY, { max_tokens: 60, stream: true }); // 2 + 60 tokens
    assert.equal(first.status, 200);
    assert.equal(first.headers.get('content-type'), 'text/event-stream; charset=utf-8');
    assert.equal(first.headers.get('x-ratelimit-remaining-tokens'), '38', 'a streamed answer carries the headers too');
    await first.text();
    const second = await complete(TPM_KEY, { max_tokens: 60 });
    assert.equal(second.status, 429);
    assert.match((await errorOf(second)).message, /tokens per minute/);
    assert.ok(Number(second.headers.get('retry-after')) >= 1);
    const huge = await complete(TPM_KEY, { prompt: 'x'.repeat(150), max_tokens: 4 });
    assert.equal(huge.status, 429);
    assert.equal((await errorOf(huge)).code, 'request_too_large');
    assert.equal(huge.headers.get('retry-after'), null, 'retrying cannot help');
  });

  test('concurrent requests: a second completion while one is in flight gets 429; once it ended, one passes again (SSE too)', async () => {
    const held = await complete(CONC_KEY, { prompt: 'hold', stream: true });
    assert.equal(held.status, 200);
    const body = held.text();
    const refused = await complete(CONC_KEY);
    assert.equal(refused.status, 429);
    assert.equal((await errorOf(refused)).code, 'concurrency_limit_exceeded');
    assert.equal(refused.headers.get('retry-after'), '1');
    for (let i = 0; holdRelease === null && i < 200; i++) await new Promise((r) => setTimeout(r, 10));
    holdRelease?.();
    holdRelease = null;
    await body;
    assert.equal((await complete(CONC_KEY)).status, 200);
  });

  test('queued documents: past the limit a POST gets 429; documents that finished no longer count', async () => {
    const doc = (id: string) => h.app.request(...post('/v1/documents', { id, text: 'a document' }, DOCS_KEY));
    assert.equal((await doc('d1')).status, 202);
    assert.equal((await doc('d2')).status, 202);
    const refused = await doc('d3');
    assert.equal(refused.status, 429);
    assert.equal((await errorOf(refused)).code, 'queued_documents_limit_exceeded');
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
    // one of them is done (its job removed, as when it completed and aged out)
    await (await h.deps.queues.prefill.getJob('doc.t-docs.d1'))?.remove();
    assert.equal((await doc('d3')).status, 202);
  });

  test('reset durations are written as OpenAI writes them', () => {
    assert.equal(formatResetDuration(20), '20ms');
    assert.equal(formatResetDuration(6000), '6s');
    assert.equal(formatResetDuration(90_500), '1m31s');
  });
});
