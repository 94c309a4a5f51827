#!/usr/bin/env node
// Builds the workspace (tsc -b) and runs every compiled test file with node's test runner.
// Usage: node scripts/test.mjs [substring ...]   (only test files whose path contains one of them)
// Then, with no substring or one starting with "training", the training recipe's Python unit tests.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { compiledTests } from './lib/compiled-tests.mjs';
import { ensureChromium } from './lib/ensure-chromium.mjs';
import { ensureNumpy } from './lib/ensure-numpy.mjs';
import { ensureRedisServer } from './lib/ensure-redis.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const filters = process.argv.slice(2);

// the cross-process and service tests start private redis-servers
if (!ensureRedisServer()) process.exit(1);

const build = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-b'], { cwd: root, stdio: 'inherit' });
if (build.status !== 0) process.exit(build.status ?? 1);

const selected = compiledTests(root, '.test.js', filters);
// the training recipe's CPU unit tests (Python, training/tests) run with the whole suite or when named
const withPython = filters.length === 0 || filters.some((s) => s.startsWith('training'));
if (selected.length === 0 && !withPython) {
  console.error(`no test files matched ${filters.join(' ') || '(all)'}`);
  process.exit(1);
}
// browser tests (*.browser.test.js) drive Debian's chromium; install it only when one is selected
if (selected.some((f) => f.endsWith('.browser.test.js')) && !ensureChromium()) process.exit(1);
if (selected.length > 0) {
  const run = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...selected], { cwd: root, stdio: 'inherit', env: process.env });
  if (run.status !== 0) process.exit(run.status ?? 1);
}
if (withPython) {
  if (!ensureNumpy()) process.exit(1);
  const py = spawnSync('python3', ['-m', 'unittest', 'discover', '-s', 'tests'], { cwd: join(root, 'training'), stdio: 'inherit', env: process.env });
  process.exit(py.status ?? 1);
}
process.exit(0);
