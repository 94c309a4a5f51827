#!/usr/bin/env node
// `npm start`: until the gateway and workers land (see README "Status"), this starts what exists on
// embedded defaults: it makes a seeded tiny DeepSeek-V4.1 checkpoint (once, under .csa2/) and runs a
// generation through the full CED path (encoder, decoder bounded replay, decode) with the csa2 CLI.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const csa2 = join(root, 'packages/csa2-engine/bin/csa2.js');
const modelDir = join(root, '.csa2/models/v41-tiny-seed1');
const run = (args) => {
  const r = spawnSync(process.execPath, [csa2, ...args], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
};
if (!existsSync(join(modelDir, 'model.safetensors'))) {
  run(['init-model', '--config', join(root, 'packages/csa2-core/configs/v41-tiny.json'), '--seed', '1', '--out', modelDir]);
}
run(['inspect', '--model', modelDir]);
console.log('\n$ csa2 generate --model .csa2/models/v41-tiny-seed1 --prompt "Long documents, asked many times." --max-tokens 24 --temperature 0.8 --seed 7');
run(['generate', '--model', modelDir, '--prompt', 'Long documents, asked many times.', '--max-tokens', '24', '--temperature', '0.8', '--seed', '7']);
console.log('\n(a random-weight model: the text is noise; the gateway and workers are not built yet, see README)');
