/** Cancels that Redis refuses are retried until they land: Redis stopped and started again, and Redis frozen (SIGSTOP). */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { pino } from 'pino';
import { cancelKey, connectRedis, startLocalRedis, type LocalRedis, type Redis } from '@csa2/jobs';
import { Cancellations } from './cancellations.js';
import { waitFor } from './testing/harness.js';

let server: LocalRedis;
let gatewayRedis: Redis;
let plain: Redis;

before(async () => {
  server = await startLocalRedis();
  // connected as the gateway connects: no offline queue, one attempt, a short command timeout
  gatewayRedis = connectRedis(server.url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: 300,
    retryStrategy: (n: number) => Math.min(50 * n, 200),
  });
  gatewayRedis.on('error', () => undefined);
  await new Promise<void>((resolve) => (gatewayRedis.status === 'ready' ? resolve() : gatewayRedis.once('ready', () => resolve())));
  plain = connectRedis(server.url);
  plain.on('error', () => undefined);
});

after(async () => {
  gatewayRedis?.disconnect();
  plain?.disconnect();
  await server?.stop();
});

test('a cancel is set at once while Redis answers', async () => {
  const c = new Cancellations(gatewayRedis, pino({ level: 'silent' }), { retryMs: 20 });
  c.cancel('now-1');
  await c.flush();
  assert.equal(await plain.exists(cancelKey('now-1')), 1);
  assert.equal(c.pendingCount, 0);
  assert.ok((await plain.ttl(cancelKey('now-1'))) > 3000, 'kept as long as the stream');
  await c.close();
});

test('a cancel made while Redis is frozen is set once Redis answers again', async () => {
  const c = new Cancellations(gatewayRedis, pino({ level: 'silent' }), { retryMs: 20 });
  const pid = server.process.pid as number;
  process.kill(pid, 'SIGSTOP');
  try {
    c.cancel('frozen-1');
    c.cancel('frozen-2');
    await c.flush(); // times out against the frozen server
    assert.equal(c.pendingCount, 2, 'still pending');
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  await waitFor('the pending cancels to land', async () => (c.pendingCount === 0 ? true : undefined));
  assert.equal(await plain.exists(cancelKey('frozen-1'), cancelKey('frozen-2')), 2);
  await c.close();
});

test('a cancel made while Redis is down is set once it is up again', async () => {
  const c = new Cancellations(gatewayRedis, pino({ level: 'silent' }), { retryMs: 20 });
  const port = server.port;
  await server.stop();
  c.cancel('down-1');
  await c.flush();
  assert.equal(c.pendingCount, 1);
  server = await startLocalRedis({ port });
  await waitFor('the pending cancel to land', async () => (c.pendingCount === 0 ? true : undefined), 20_000);
  const check = connectRedis(server.url);
  try {
    assert.equal(await check.exists(cancelKey('down-1')), 1);
  } finally {
    check.disconnect();
  }
  await c.close();
});
