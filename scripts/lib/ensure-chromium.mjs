// Makes sure Debian's chromium is installed (the status page's browser test drives it headless). The
// browser test fails, naming this, when it is absent.
import { spawnSync } from 'node:child_process';
import { ensureDebianPackages } from './ensure-apt.mjs';

export const CHROMIUM_PATH = '/usr/bin/chromium';

/** Returns true when chromium is available (possibly after installing it). */
export function ensureChromium({ log } = {}) {
  return ensureDebianPackages({
    what: 'chromium (the status page browser test needs it)',
    packages: ['chromium'],
    present: () => spawnSync(CHROMIUM_PATH, ['--version'], { stdio: 'ignore' }).status === 0,
    ...(log ? { log } : {}),
  });
}
