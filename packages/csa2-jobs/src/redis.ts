/**
 * @module redis
 * Redis connections as BullMQ wants them, and a local redis-server launcher (Debian's redis-server)
 * used by `npm start` and the tests.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis, type RedisOptions } from 'ioredis';

/** An ioredis client for BullMQ (blocking commands need `maxRetriesPerRequest: null`). */
export function connectRedis(url: string, options: RedisOptions = {}): Redis {
  const merged: RedisOptions = { maxRetriesPerRequest: null, enableReadyCheck: true, ...options };
  // (the cast picks the (path, options) overload, which exactOptionalPropertyTypes otherwise rejects)
  return new Redis(url, merged as RedisOptions & { replyMapping?: never });
}

/** A free TCP port on 127.0.0.1 (bind to 0, read, release). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr !== null ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

export interface LocalRedis {
  readonly url: string;
  readonly port: number;
  readonly process: ChildProcess;
  /** Stops the server (SIGTERM, then SIGKILL after 5 s) and removes its directory. */
  stop(): Promise<void>;
}

/** Finds redis-server on PATH (or in /usr/sbin, /usr/bin); null when not installed. */
export function findRedisServer(): string | null {
  for (const candidate of ['redis-server', '/usr/bin/redis-server', '/usr/sbin/redis-server', '/usr/local/bin/redis-server']) {
    const r = spawnSync(candidate, ['--version'], { encoding: 'utf8' });
    if (r.status === 0) return candidate;
  }
  return null;
}

/**
 * Starts a private redis-server on a free local port: no persistence unless `appendOnly`, the
 * `noeviction` policy BullMQ needs, data in a temporary directory. Resolves once it accepts commands.
 * `detached`: run it in its own process group (signals sent to the caller's group don't reach it).
 */
export async function startLocalRedis(opts: { port?: number; appendOnly?: boolean; dir?: string; detached?: boolean } = {}): Promise<LocalRedis> {
  const bin = findRedisServer();
  if (bin === null) throw new Error('redis-server is not installed (Debian: apt-get install -y redis-server), or set REDIS_URL to a running Redis');
  const port = opts.port ?? (await freePort());
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'csa2-redis-'));
  const ownDir = opts.dir === undefined;
  const child = spawn(
    bin,
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      dir,
      '--save',
      '',
      '--appendonly',
      opts.appendOnly === true ? 'yes' : 'no',
      '--maxmemory-policy',
      'noeviction',
      '--protected-mode',
      'no',
    ],
    // detached: its own process group, so a terminal's Ctrl-C reaches only the launcher, which stops
    // the server after everything that uses it (npm start)
    { stdio: ['ignore', 'pipe', 'pipe'], detached: opts.detached === true },
  );
  let log = '';
  child.stdout?.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-4000)));
  child.stderr?.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-4000)));
  const url = `redis://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited (code ${child.exitCode}):\n${log}`);
    const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => undefined);
    try {
      await probe.connect();
      await probe.ping();
      probe.disconnect();
      break;
    } catch {
      probe.disconnect();
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`redis-server did not accept connections on ${url} within 10 s:\n${log}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    url,
    port,
    process: child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise<void>((r) => child.once('exit', () => r()));
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(t);
      }
      if (ownDir) rmSync(dir, { recursive: true, force: true });
    },
  };
}
