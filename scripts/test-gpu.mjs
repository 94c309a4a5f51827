#!/usr/bin/env node
// The GPU suite: builds the workspace and runs every compiled `*.gpu-test.js` with node's test runner.
// It needs an NVIDIA GPU and onnxruntime-node's CUDA provider (infra/README.md, "GPU encoder workers");
// CI, which has neither, runs `npm test` instead. Usage: node scripts/test-gpu.mjs [substring ...]
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const filters = process.argv.slice(2);
if (process.env.CSA2_SKIP_BUILD !== '1') {
  const build = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-b'], { cwd: root, stdio: 'inherit' });
  if (build.status !== 0) process.exit(build.status ?? 1);
}
function* walk(dir) {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules') continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* walk(path);
    else if (name.endsWith('.gpu-test.js')) yield path;
  }
}
const files = [];
for (const r of ['packages', 'services', 'test', 'bench'].map((d) => join(root, d))) {
  try {
    statSync(r);
  } catch {
    continue;
  }
  for (const f of walk(r)) if (f.includes('/dist/')) files.push(f);
}
const selected = files.filter((f) => filters.length === 0 || filters.some((s) => relative(root, f).includes(s))).sort();
if (selected.length === 0) {
  console.error(`no GPU test files matched ${filters.join(' ') || '(all)'}`);
  process.exit(1);
}
const run = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...selected], { cwd: root, stdio: 'inherit', env: process.env });
process.exit(run.status ?? 1);
