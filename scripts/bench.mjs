#!/usr/bin/env node
// Builds the workspace (tsc -b, as scripts/test.mjs does) and runs the compiled bench entry,
// passing the arguments through: node scripts/bench.mjs [SUITE ...] [options]   (see --help)
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

const build = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-b'], { cwd: root, stdio: 'inherit' });
if (build.status !== 0) process.exit(build.status ?? 1);

const run = spawnSync(process.execPath, [join(root, 'bench/dist/main.js'), ...process.argv.slice(2)], { cwd: root, stdio: 'inherit', env: process.env });
if (run.signal !== null) {
  console.error(`bench: killed by ${run.signal}`);
  process.exit(1);
}
process.exit(run.status ?? 1);
