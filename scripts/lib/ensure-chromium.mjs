// Makes sure Debian's chromium is installed (the status page's browser test drives it headless).
// Installs it with apt-get when missing and running as root (as ensure-redis.mjs does for
// redis-server); otherwise explains how. The browser test fails, naming this, when it is absent.
import { spawnSync } from 'node:child_process';

export const CHROMIUM_PATH = '/usr/bin/chromium';

function present() {
  return spawnSync(CHROMIUM_PATH, ['--version'], { stdio: 'ignore' }).status === 0;
}

/** Returns true when chromium is available (possibly after installing it). */
export function ensureChromium({ log = (m) => process.stderr.write(`${m}\n`) } = {}) {
  if (present()) return true;
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const hasApt = spawnSync('apt-get', ['--version'], { stdio: 'ignore' }).status === 0;
  if (isRoot && hasApt) {
    log('chromium is missing (the status page browser test needs it): installing it with apt-get (Debian package chromium)…');
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    const upd = spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
    const inst = upd.status === 0 ? spawnSync('apt-get', ['install', '-y', '-qq', 'chromium'], { stdio: 'inherit', env }) : upd;
    if (inst.status === 0 && present()) return true;
    log('installing chromium failed; install it yourself (apt-get install -y chromium)');
    return false;
  }
  log('chromium is not installed. Install it with `sudo apt-get install -y chromium` (Debian/Ubuntu); the status page browser test needs it.');
  return false;
}
