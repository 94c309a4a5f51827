// Makes sure python3 with numpy is there for the training recipe's CPU unit tests (training/tests).
import { spawnSync } from 'node:child_process';
import { ensureDebianPackages } from './ensure-apt.mjs';

/** Returns true when python3 can import numpy (possibly after installing it). */
export function ensureNumpy({ log } = {}) {
  return ensureDebianPackages({
    what: 'python3 with numpy',
    packages: ['python3', 'python3-numpy'],
    present: () => spawnSync('python3', ['-c', 'import numpy'], { stdio: 'ignore' }).status === 0,
    ...(log ? { log } : {}),
  });
}
