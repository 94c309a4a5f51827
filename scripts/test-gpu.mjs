#!/usr/bin/env node
// The GPU suite: builds the workspace and runs every compiled `*.gpu-test.js` with node's test runner.
// It needs an NVIDIA GPU and onnxruntime-node's CUDA provider (infra/README.md, "GPU encoder workers");
// CI, which has neither, runs `npm test` instead. Usage: node scripts/test-gpu.mjs [substring ...]
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { compiledTests } from './lib/compiled-tests.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const filters = process.argv.slice(2);
if (process.env.CSA2_SKIP_BUILD !== '1') {
  const build = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-b'], { cwd: root, stdio: 'inherit' });
  if (build.status !== 0) process.exit(build.status ?? 1);
}
const selected = compiledTests(root, '.gpu-test.js', filters);
if (selected.length === 0) {
  console.error(`no GPU test files matched ${filters.join(' ') || '(all)'}`);
  process.exit(1);
}
const run = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...selected], { cwd: root, stdio: 'inherit', env: process.env });
process.exit(run.status ?? 1);
