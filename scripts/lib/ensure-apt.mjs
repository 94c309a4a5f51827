// Makes sure something a command needs from Debian is there: when `present()` says no, installs the
// packages with apt-get if running as root on a machine with apt, otherwise explains how. Used by
// ensure-redis, ensure-chromium and ensure-numpy.
import { spawnSync } from 'node:child_process';

/**
 * Returns true when `present()` holds (possibly after installing `packages`). `what` names the need in
 * the messages; `otherwise` is said when it cannot be installed here.
 */
export function ensureDebianPackages({ what, packages, present, otherwise, log = (m) => process.stderr.write(`${m}\n`) }) {
  if (present()) return true;
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const hasApt = spawnSync('apt-get', ['--version'], { stdio: 'ignore' }).status === 0;
  const list = packages.join(' ');
  if (isRoot && hasApt) {
    log(`${what} is missing: installing it with apt-get (Debian packages ${list})…`);
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    const upd = spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
    const inst = upd.status === 0 ? spawnSync('apt-get', ['install', '-y', '-qq', ...packages], { stdio: 'inherit', env }) : upd;
    if (inst.status === 0 && present()) return true;
    log(`installing ${list} failed; install it yourself (apt-get install -y ${list})`);
    return false;
  }
  log(`${what} is not installed. Install it with \`sudo apt-get install -y ${list}\` (Debian/Ubuntu)${otherwise ? `, ${otherwise}` : ''}.`);
  return false;
}
