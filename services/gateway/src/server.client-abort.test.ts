/**
 * A client that closes its connection in the middle of its request body is a
 * client abort — status 499 in csa2_http_requests_total and in the log, csa2_http_client_aborts_total
 * — not a 500. Real sockets against a listening gateway.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createServiceLogger, startLocalRedis, type LocalRedis } from '@csa2/jobs';
import { startGateway, type RunningGateway } from './server.js';
import { KEY_A, MODEL_NAME, testEnv, waitFor } from './testing/harness.js';

/** Sends the headers and `sent` bytes of a `declared`-byte body (or a chunked one), then closes the socket. */
async function abandonBody(port: number, path: string, opts: { declared?: number; sent: number }): Promise<void> {
  const socket = connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const body = `{"model": "${MODEL_NAME}", "prompt": "${'x'.repeat(opts.sent)}`;
  const framing = opts.declared !== undefined ? `Content-Length: ${opts.declared}` : 'Transfer-Encoding: chunked';
  const payload = opts.declared !== undefined ? body : `${body.length.toString(16)}\r\n${body}\r\n`;
  socket.write(
    `POST ${path} HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${KEY_A}\r\nContent-Type: application/json\r\nx-request-id: abort-${opts.sent}\r\n${framing}\r\n\r\n${payload}`,
  );
  await new Promise((r) => setTimeout(r, 150));
  socket.destroy();
}

function counter(text: string, name: string, labels: Readonly<Record<string, string>>): number {
  let total = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-z_0-9]+)\{(.*)\} (\S+)$/.exec(line);
    if (m === null || m[1] !== name) continue;
    const have = new Map([...(m[2] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) total += Number(m[3]);
  }
  return total;
}

describe('a client that closes mid-body', () => {
  let localRedis: LocalRedis;
  let storeDir: string;
  let gw: RunningGateway;
  const lines: Record<string, unknown>[] = [];

  before(async () => {
    localRedis = await startLocalRedis();
    storeDir = mkdtempSync(join(tmpdir(), 'csa2-gateway-abort-'));
    const logger = createServiceLogger('gateway', 'debug', { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
    gw = await startGateway(testEnv(localRedis.url, storeDir), { logger });
  });
  after(async () => {
    await gw?.close();
    await localRedis?.stop();
    rmSync(storeDir, { recursive: true, force: true });
  });

  test('is counted as a client abort (499), never as a 500, in metrics and in the log', async () => {
    await abandonBody(gw.port, '/v1/completions', { declared: 4000, sent: 100 });
    await abandonBody(gw.port, '/v1/chat/completions', { sent: 200 });
    await abandonBody(gw.port, '/v1/documents', { declared: 60_000, sent: 3000 });
    const metrics = await waitFor('the three aborts to be counted', async () => {
      const text = await (await fetch(`${gw.url}/metrics`)).text();
      return counter(text, 'csa2_http_client_aborts_total', {}) >= 3 ? text : undefined;
    });
    assert.equal(counter(metrics, 'csa2_http_requests_total', { status: '500' }), 0, 'no phantom 500s');
    assert.equal(counter(metrics, 'csa2_http_requests_total', { status: '499' }), 3);
    assert.equal(counter(metrics, 'csa2_http_client_aborts_total', { route: '/v1/completions' }), 1);
    assert.equal(counter(metrics, 'csa2_http_client_aborts_total', { route: '/v1/chat/completions' }), 1);
    assert.equal(counter(metrics, 'csa2_http_client_aborts_total', { route: '/v1/documents' }), 1);
    const aborted = lines.filter((l) => l['msg'] === 'client closed the request');
    assert.deepEqual(aborted.map((l) => [l['level'], l['status'], l['reqId']]).sort(), [
      ['info', 499, 'abort-100'],
      ['info', 499, 'abort-200'],
      ['info', 499, 'abort-3000'],
    ]);
    assert.equal(lines.filter((l) => l['msg'] === 'request failed').length, 0, 'nothing logged as a failure');
    // the server is fine afterwards
    assert.equal((await fetch(`${gw.url}/healthz`)).status, 200);
  });
});
