// Makes sure python3 with numpy is there for the training recipe's CPU unit tests (training/tests).
// Installs Debian's python3-numpy with apt-get when missing and running as root; otherwise explains how.
import { spawnSync } from 'node:child_process';

function present() {
  return spawnSync('python3', ['-c', 'import numpy'], { stdio: 'ignore' }).status === 0;
}

/** Returns true when python3 can import numpy (possibly after installing it). */
export function ensureNumpy({ log = (m) => process.stderr.write(`${m}\n`) } = {}) {
  if (present()) return true;
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const hasApt = spawnSync('apt-get', ['--version'], { stdio: 'ignore' }).status === 0;
  if (isRoot && hasApt) {
    log('python3 with numpy is missing: installing it with apt-get (Debian packages python3, python3-numpy)…');
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    const upd = spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
    const inst = upd.status === 0 ? spawnSync('apt-get', ['install', '-y', '-qq', 'python3', 'python3-numpy'], { stdio: 'inherit', env }) : upd;
    if (inst.status === 0 && present()) return true;
    log('installing python3-numpy failed; install it yourself (apt-get install -y python3-numpy)');
    return false;
  }
  log('python3 with numpy is not installed: `sudo apt-get install -y python3 python3-numpy` (Debian/Ubuntu).');
  return false;
}
