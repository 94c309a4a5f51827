/**
 * Observability across processes: the gateway, an encoder and a decoder
 * worker as real processes. A request's x-request-id is echoed and reaches every log line logged for
 * it in all three processes, in one format; every worker serves /healthz, /readyz and /metrics on its
 * port; a worker failure (a corrupted stored chunk) reaches the client as a code, a public message and
 * the request id, while the worker's details (object key, checksums) stay in the logs.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { API_KEY, Pipeline, type ServiceName } from '../harness/pipeline.js';
import { pollUntil } from '@csa2/jobs/testing';

let pipe: Pipeline;

before(async () => {
  // debug: the gateway's per-request line is at debug; a low threshold puts short prompts through the encoder
  pipe = await Pipeline.start({ env: { CSA2_LOG_LEVEL: 'debug', CSA2_PREFILL_THRESHOLD_TOKENS: '64' } });
});
after(async () => {
  await pipe?.stop();
});

function e2e(name: string, fn: () => Promise<void>): void {
  test(name, { timeout: 180_000 }, async () => {
    try {
      await fn();
    } catch (err) {
      pipe.dumpLogs();
      throw err;
    }
  });
}

interface Line {
  readonly proc: string;
  readonly fields: Record<string, unknown>;
}

/** The JSON log lines of every process so far (other output, e.g. a process's own stderr notes, skipped). */
function jsonLines(): Line[] {
  const out: Line[] = [];
  for (const raw of pipe.logLines()) {
    const m = /^\[([a-z]+)#\d+\] (\{.*\})$/.exec(raw);
    if (m === null) continue;
    try {
      out.push({ proc: m[1] as string, fields: JSON.parse(m[2] as string) as Record<string, unknown> });
    } catch {
      // a line split across chunks: not one of ours to check
    }
  }
  return out;
}

const SERVICE_OF: Record<string, string> = { gateway: 'gateway', encoder: 'encoder-worker', decoder: 'decoder-worker' };

function waitForLines(what: string, check: (lines: Line[]) => boolean, timeoutMs = 20_000): Promise<Line[]> {
  return pollUntil(
    what,
    () => {
      const lines = jsonLines();
      return check(lines) ? lines : undefined;
    },
    { timeoutMs, everyMs: 100 },
  );
}

const post = (path: string, body: unknown, reqId: string) =>
  fetch(`${pipe.url}${path}`, {
    method: 'POST',
    signal: AbortSignal.timeout(60_000),
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json', 'x-request-id': reqId },
    body: JSON.stringify(body),
  });

e2e('one request id in every log line of the request, in the gateway and both workers, in one format', async () => {
  const reqId = 'e2e-trace.0001';
  const res = await post(
    '/v1/completions',
    { model: 'tiny', prompt: 'a prompt long enough to go through the encoder worker first: '.repeat(2), max_tokens: 4, temperature: 0 },
    reqId,
  );
  assert.equal(res.status, 200, await res.clone().text());
  assert.equal(res.headers.get('x-request-id'), reqId);
  const requestId = ((await res.json()) as { id: string }).id;
  const lines = await waitForLines(
    'the lines of the request in all three processes',
    (ls) =>
      ls.some((l) => l.proc === 'gateway' && l.fields['reqId'] === reqId && l.fields['msg'] === 'request') &&
      ls.some((l) => l.proc === 'encoder' && l.fields['reqId'] === reqId && l.fields['msg'] === 'prompt encoded; decode enqueued') &&
      ls.some((l) => l.proc === 'decoder' && l.fields['reqId'] === reqId && l.fields['msg'] === 'decode done'),
  );
  // every line about this request (it names the completion id) carries the request id
  const about = lines.filter((l) => l.fields['requestId'] === requestId);
  assert.ok(about.some((l) => l.proc === 'encoder') && about.some((l) => l.proc === 'decoder'), 'both workers logged the request');
  for (const l of about) assert.equal(l.fields['reqId'], reqId, `${l.proc}: ${JSON.stringify(l.fields)}`);
  assert.ok(lines.some((l) => l.proc === 'encoder' && l.fields['reqId'] === reqId && l.fields['msg'] === 'prompt encoded; decode enqueued'));
  assert.ok(lines.some((l) => l.proc === 'decoder' && l.fields['reqId'] === reqId && l.fields['msg'] === 'decode done'));
  assert.ok(lines.some((l) => l.proc === 'gateway' && l.fields['reqId'] === reqId && l.fields['msg'] === 'request'));
  // one format everywhere: level name, ISO time, the service, a message
  for (const l of lines) {
    assert.match(String(l.fields['level']), /^(debug|info|warn|error|fatal)$/, JSON.stringify(l));
    assert.match(String(l.fields['time']), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.equal(l.fields['service'], SERVICE_OF[l.proc]);
    assert.equal(typeof l.fields['msg'], 'string');
  }
});

e2e('every worker serves /healthz, /readyz and /metrics on its own port', async () => {
  for (const name of ['encoder', 'decoder'] as const satisfies readonly ServiceName[]) {
    const ids = pipe.processIds(name);
    assert.ok(ids.length > 0);
    for (const id of ids) {
      const base = `http://127.0.0.1:${pipe.httpPorts.get(id) ?? 0}`;
      const health = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(10_000) });
      assert.equal(health.status, 200);
      const ready = await fetch(`${base}/readyz`, { signal: AbortSignal.timeout(10_000) });
      assert.equal(ready.status, 200);
      assert.deepEqual(await ready.json(), { status: 'ready', checks: { engine: 'ok', redis: 'ok', worker: 'ok' } });
      const metrics = await (await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
      const queue = name === 'encoder' ? 'prefill' : 'decode';
      const completed = /^csa2_worker_jobs_total\{[^}]*outcome="completed"[^}]*\} (\d+)$/m.exec(metrics);
      assert.ok(completed !== null && Number(completed[1]) >= 1, `${id}: a completed ${queue} job is counted`);
      assert.match(metrics, new RegExp(`service="${SERVICE_OF[name] ?? ''}"`));
      assert.match(metrics, new RegExp(`queue="${queue}"`));
    }
  }
});

/** Every file under `dir`. */
function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

e2e('a worker failure reaches the client as a code, a public message and the request id; the details only in the logs', async () => {
  const text = 'A document whose stored chunk will be damaged. '.repeat(8);
  const created = await post('/v1/documents', { id: 'doc-damaged', text }, 'e2e-ingest');
  assert.equal(created.status, 202);
  const deadline = Date.now() + 60_000;
  for (;;) {
    const doc = (await (await fetch(`${pipe.url}/v1/documents/doc-damaged`, { headers: { authorization: `Bearer ${API_KEY}` } })).json()) as { status: string };
    if (doc.status === 'ready') break;
    assert.ok(doc.status !== 'failed' && Date.now() < deadline, JSON.stringify(doc));
    await new Promise((r) => setTimeout(r, 100));
  }
  // flip one byte in the middle of the document's (first) chunk object, named by its manifest
  const storeDir = fileURLToPath(pipe.storeUrl);
  const manifest = JSON.parse(readFileSync(join(storeDir, 'tenants', 'acme', 'documents', 'doc-damaged', 'manifest.json'), 'utf8')) as {
    chunks: { key: string }[];
  };
  const key = manifest.chunks[0]?.key ?? '';
  const chunk = files(join(storeDir, 'tenants', 'acme', 'chunks')).find((f) => f.endsWith(key));
  assert.ok(key !== '' && chunk !== undefined, 'the document has a chunk');
  const bytes = readFileSync(chunk);
  bytes[bytes.length >> 1] = (bytes[bytes.length >> 1] as number) ^ 0xff;
  writeFileSync(chunk, bytes);

  const reqId = 'e2e-damaged-1';
  const res = await post('/v1/completions', { model: 'tiny', prompt: ' Question?', max_tokens: 4, document_id: 'doc-damaged' }, reqId);
  const body = await res.text();
  assert.equal(res.status, 500, body);
  assert.equal(res.headers.get('x-request-id'), reqId);
  assert.deepEqual(JSON.parse(body), {
    error: { message: `A stored artifact this request needs is damaged. (request id: ${reqId})`, type: 'server_error', param: null, code: 'artifact_corrupt' },
  });
  const chunkKey = chunk.split('/').at(-1) ?? '';
  assert.ok(!body.includes(chunkKey.slice(0, 16)) && !/sha|checksum|tenants\//i.test(body), 'no object key, no checksum');
  // (the log lines travel through the processes' pipes: they may arrive after the response)
  const lines = await waitForLines(
    'the failure in the decoder and gateway logs',
    (ls) =>
      ls.some((l) => l.proc === 'decoder' && l.fields['reqId'] === reqId && l.fields['code'] === 'artifact-corrupt') &&
      ls.some((l) => l.proc === 'gateway' && l.fields['reqId'] === reqId && l.fields['msg'] === 'request failed'),
  );
  const workerLine = lines.find((l) => l.proc === 'decoder' && l.fields['reqId'] === reqId && l.fields['code'] === 'artifact-corrupt');
  assert.match(String(workerLine?.fields['err']), new RegExp(chunkKey.slice(0, 16)), 'the decoder logged which object');
  assert.ok(
    lines.some((l) => l.proc === 'gateway' && l.fields['reqId'] === reqId && String(l.fields['err']).includes('[artifact-corrupt]')),
    'the gateway logged the detail with the request id',
  );
});
