// Makes sure Debian's redis-server is installed (tests and `npm start` run a private one).
// Installs it with apt-get when missing and running as root; otherwise explains how.
import { spawnSync } from 'node:child_process';

const CANDIDATES = ['redis-server', '/usr/bin/redis-server', '/usr/sbin/redis-server', '/usr/local/bin/redis-server'];

function present() {
  return CANDIDATES.some((c) => spawnSync(c, ['--version'], { stdio: 'ignore' }).status === 0);
}

/** Returns true when redis-server is available (possibly after installing it). */
export function ensureRedisServer({ log = (m) => process.stderr.write(`${m}\n`) } = {}) {
  if (present()) return true;
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const hasApt = spawnSync('apt-get', ['--version'], { stdio: 'ignore' }).status === 0;
  if (isRoot && hasApt) {
    log('redis-server is missing: installing it with apt-get (Debian package redis-server)…');
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    const upd = spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
    const inst = upd.status === 0 ? spawnSync('apt-get', ['install', '-y', '-qq', 'redis-server'], { stdio: 'inherit', env }) : upd;
    if (inst.status === 0 && present()) return true;
    log('installing redis-server failed; install it yourself (apt-get install -y redis-server) or set REDIS_URL to a running Redis');
    return false;
  }
  log(
    'redis-server is not installed. Install it with `sudo apt-get install -y redis-server` (Debian/Ubuntu), ' +
      'or point REDIS_URL at a running Redis (≥ 6.2).',
  );
  return false;
}
