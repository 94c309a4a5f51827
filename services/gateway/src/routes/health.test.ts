import assert from 'node:assert/strict';
import { rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { startLocalRedis, type LocalRedis } from '@csa2/jobs';
import { MODEL_NAME, fakeDecoder, finalEntry, get, post, startHarness, tokenEntries, writeEntries, type Harness } from '../testing/harness.js';

describe('/healthz, /readyz and /metrics', () => {
  let h: Harness;
  let restarted: LocalRedis | undefined;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
    await restarted?.stop();
  });

  const readyz = async (): Promise<{ status: number; body: { status: string; checks: Record<string, string> }; ms: number }> => {
    const t0 = Date.now();
    const res = await h.app.request('http://gateway.test/readyz');
    return { status: res.status, body: (await res.json()) as { status: string; checks: Record<string, string> }, ms: Date.now() - t0 };
  };

  test('/metrics exposes the latency, queue, prefill, artifact and cached-token metrics after a request', async () => {
    fakeDecoder(h, async (job) => {
      await writeEntries(h.redis, job.data.requestId, [...tokenEntries('ok!'), finalEntry(job.data, 3, { cachedTokens: 2 })]);
    });
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'metrics please', stream: true }));
    await res.text();
    const metrics = await h.app.request('http://gateway.test/metrics');
    assert.equal(metrics.status, 200);
    assert.match(metrics.headers.get('content-type') ?? '', /^text\/plain/);
    const text = await metrics.text();
    for (const name of [
      'csa2_time_to_first_token_seconds',
      'csa2_inter_token_latency_seconds',
      'csa2_e2e_request_latency_seconds',
      'csa2_queue_wait_seconds',
      'csa2_prefill_tokens_total',
      'csa2_artifact_bytes_total',
      'csa2_cached_tokens_total',
      'csa2_queue_jobs',
    ]) {
      assert.match(text, new RegExp(`^# TYPE ${name} `, 'm'), name);
    }
    assert.match(text, /^csa2_time_to_first_token_seconds_count\{endpoint="completions",route="decode"\} 1$/m);
    assert.match(text, /^csa2_inter_token_latency_seconds_count\{endpoint="completions"\} 2$/m);
    assert.match(text, /^csa2_e2e_request_latency_seconds_count\{endpoint="completions",route="decode",outcome="ok"\} 1$/m);
    assert.match(text, /^csa2_queue_wait_seconds_count\{queue="decode"\} 1$/m);
    assert.match(text, /^csa2_cached_tokens_total\{endpoint="completions"\} 2$/m);
    assert.match(text, /^csa2_completion_tokens_total\{endpoint="completions"\} 3$/m);
    // jobs by state, read from BullMQ at scrape time (the job may still be finishing: active or completed)
    assert.match(text, /^csa2_queue_jobs\{queue="decode",state="(completed|active)"\} 1$/m);
    assert.match(text, /^csa2_queue_jobs\{queue="prefill",state="prioritized"\} 0$/m);
    assert.match(text, /^csa2_queue_jobs\{queue="decode",state="delayed"\} 0$/m);
    // the autoscaling backlog of @csa2/jobs is served too
    assert.match(text, /^csa2_queue_backlog_jobs\{queue="decode"\} 0$/m);
    assert.match(text, /^csa2_prefill_backlog_tokens /m);
    assert.match(text, /^csa2_http_requests_total\{method="POST",route="\/v1\/completions",status="200"\} 1$/m);
  });

  test('/healthz and /readyz answer 200 while Redis and the store are up', async () => {
    assert.equal((await h.app.request('http://gateway.test/healthz')).status, 200);
    const r = await readyz();
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { status: 'ready', checks: { redis: 'ok', store: 'ok' } });
  });

  test('/readyz is 503 naming the store when the store root is unusable', async () => {
    rmSync(h.storeDir, { recursive: true, force: true });
    writeFileSync(h.storeDir, 'not a directory');
    try {
      const r = await readyz();
      assert.equal(r.status, 503);
      assert.equal(r.body.checks['redis'], 'ok');
      assert.match(r.body.checks['store'] ?? '', /^store unavailable: /);
    } finally {
      rmSync(h.storeDir, { force: true });
      mkdirSync(h.storeDir);
    }
  });

  test('/readyz turns 503 within ~1 s when Redis stops, and 200 again after it restarts', async () => {
    const port = h.localRedis.port;
    await h.localRedis.stop();
    const down = await readyz();
    assert.equal(down.status, 503);
    assert.ok(down.ms < 1500, `readyz took ${down.ms} ms`);
    assert.match(down.body.checks['redis'] ?? '', /^redis unavailable: /);
    assert.equal(down.body.checks['store'], 'ok');
    assert.equal((await h.app.request('http://gateway.test/healthz')).status, 200, 'the process itself is healthy');

    // requests fail fast with 503 rather than hanging
    const t0 = Date.now();
    const res = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'anyone there?' }));
    assert.equal(res.status, 503);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'redis_unavailable');
    assert.ok(Date.now() - t0 < 1500);
    assert.equal((await h.app.request(...get('/v1/documents/any'))).status, 503);
    const metrics = await h.app.request('http://gateway.test/metrics');
    assert.equal(metrics.status, 200, '/metrics still answers (without the queue gauges)');
    const downText = await metrics.text();
    assert.doesNotMatch(downText, /^csa2_queue_jobs\{/m);
    assert.doesNotMatch(downText, /^csa2_queue_backlog_jobs/m);

    restarted = await startLocalRedis({ port });
    const deadline = Date.now() + 5000;
    let up = await readyz();
    while (up.status !== 200 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      up = await readyz();
    }
    assert.equal(up.status, 200, JSON.stringify(up.body));
    // and work is accepted again on the same connection and queues
    const doc = await h.app.request(...post('/v1/documents', { id: 'after-restart', text: 'back' }));
    assert.equal(doc.status, 202);
    assert.equal(await h.deps.queues.prefill.count(), 1);
  });
});
