// Makes sure Debian's redis-server is installed (tests and `npm start` run a private one).
import { spawnSync } from 'node:child_process';
import { ensureDebianPackages } from './ensure-apt.mjs';

const CANDIDATES = ['redis-server', '/usr/bin/redis-server', '/usr/sbin/redis-server', '/usr/local/bin/redis-server'];

/** Returns true when redis-server is available (possibly after installing it). */
export function ensureRedisServer({ log } = {}) {
  return ensureDebianPackages({
    what: 'redis-server',
    packages: ['redis-server'],
    present: () => CANDIDATES.some((c) => spawnSync(c, ['--version'], { stdio: 'ignore' }).status === 0),
    otherwise: 'or point REDIS_URL at a running Redis (≥ 6.2)',
    ...(log ? { log } : {}),
  });
}
