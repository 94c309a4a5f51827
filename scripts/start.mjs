#!/usr/bin/env node
// `npm start` (after `npm ci`): the whole pipeline on one machine, on embedded defaults.
//
//   Redis      REDIS_URL, or Debian's redis-server on a free local port (installed with apt-get when
//              missing and running as root), ephemeral
//   store      CSA2_STORE_URL, or the filesystem store under .csa2/store
//   model      CSA2_MODEL_DIR, or the committed trained checkpoint models/v41-mini-128k (the released
//              40-layer V4.1 schedule at dim 128, 128K context; an early checkpoint: see its MODEL_CARD.md)
//   gateway    services/gateway/dist/main.js on PORT (8080), API key from CSA2_API_KEYS or generated
//   workers    one encoder-worker and one decoder-worker
//
// Every service runs as a child process in its own process group; Ctrl-C (SIGINT) or SIGTERM stops
// them in order — gateway and workers get SIGTERM and finish or hand back their jobs, then Redis
// stops. A second Ctrl-C kills whatever is left. If a service dies on its own, everything stops.
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ensureRedisServer } from './lib/ensure-redis.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const node = process.execPath;
const say = (line) => process.stdout.write(`[start] ${line}\n`);
const fail = (line) => {
  process.stderr.write(`[start] ${line}\n`);
  process.exit(1);
};

// --- build (incremental: fast when `npm ci` already built) ---
{
  const r = spawnSync(node, [join(root, 'node_modules/typescript/bin/tsc'), '-b'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) fail('the build failed (tsc -b); fix it or run `npm ci` first');
}
const { startLocalRedis } = await import(pathToFileURL(join(root, 'packages/csa2-jobs/dist/index.js')).href);

// --- model ---
let modelDir = process.env.CSA2_MODEL_DIR;
if (modelDir === undefined || modelDir === '') {
  modelDir = join(root, 'models/v41-mini-128k');
  if (!existsSync(join(modelDir, 'model.safetensors')))
    fail(`the default model is missing (${modelDir}/model.safetensors); set CSA2_MODEL_DIR to a checkpoint`);
}

// --- object store ---
let storeUrl = process.env.CSA2_STORE_URL;
if (storeUrl === undefined || storeUrl === '') {
  const dir = join(root, '.csa2/store');
  mkdirSync(dir, { recursive: true });
  storeUrl = pathToFileURL(dir).href;
}

// --- Redis ---
let redis = null; // our own redis-server, when we started one
let redisUrl = process.env.REDIS_URL;
if (redisUrl === undefined || redisUrl === '') {
  if (!ensureRedisServer({ log: say }))
    fail('redis-server is needed (npm start runs its own on a free port), or set REDIS_URL=redis://host:port to a running Redis (maxmemory-policy noeviction)');
  redis = await startLocalRedis({ detached: true });
  redisUrl = redis.url;
}

// --- API key ---
let apiKeys = process.env.CSA2_API_KEYS;
let apiKey;
if (apiKeys === undefined || apiKeys === '') {
  apiKey = `sk-csa2-${randomBytes(24).toString('base64url')}`;
  apiKeys = `${apiKey}:default`;
} else {
  apiKey = (apiKeys.split(',')[0] ?? '').trim().replace(/:[^:]*$/, '');
}
// the status page's key (CSA2_OPERATOR_KEYS; the first one is printed)
let operatorKeys = process.env.CSA2_OPERATOR_KEYS;
if (operatorKeys === undefined || operatorKeys === '') operatorKeys = `sk-csa2-op-${randomBytes(24).toString('base64url')}`;
const operatorKey = (operatorKeys.split(',')[0] ?? '').trim();
const port = process.env.PORT !== undefined && process.env.PORT !== '' ? process.env.PORT : '8080';

// --- services ---
// the workers' glibc allocator settings (packages/csa2-jobs/src/malloc-env.ts, infra/README.md)
const env = {
  MALLOC_MMAP_THRESHOLD_: '1048576',
  ...process.env,
  REDIS_URL: redisUrl,
  CSA2_STORE_URL: storeUrl,
  CSA2_MODEL_DIR: modelDir,
  CSA2_API_KEYS: apiKeys,
  CSA2_OPERATOR_KEYS: operatorKeys,
  PORT: port,
};
const children = new Map(); // name -> ChildProcess
let stopping = false;
let exitCode = 0;

function launch(name, script, readyText) {
  const child = spawn(node, [join(root, script)], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  children.set(name, child);
  let resolveReady;
  let rejectReady;
  const ready = new Promise((res, rej) => ((resolveReady = res), (rejectReady = rej)));
  const pad = name.padEnd(7);
  for (const stream of [child.stdout, child.stderr]) {
    createInterface({ input: stream }).on('line', (line) => {
      process.stdout.write(`[${pad}] ${line}\n`);
      if (readyText !== null && line.includes(readyText)) resolveReady();
    });
  }
  if (readyText === null) resolveReady();
  child.on('exit', (code, signal) => {
    children.delete(name);
    rejectReady(new Error(`${name} exited during start (${signal ?? `code ${code}`})`));
    if (!stopping) {
      process.stderr.write(`[start] ${name} exited unexpectedly (${signal ?? `code ${code}`}); stopping everything\n`);
      exitCode = 1;
      void stop();
    }
  });
  return ready;
}

async function stop() {
  if (stopping) return;
  stopping = true;
  say('stopping: gateway and workers finish or hand back their work…');
  const exits = [...children.values()].map((c) => new Promise((res) => (c.exitCode !== null || c.signalCode !== null ? res() : c.once('exit', res))));
  for (const c of children.values()) c.kill('SIGTERM');
  const killTimer = setTimeout(() => {
    say('still running after 40 s: killing');
    for (const c of children.values()) c.kill('SIGKILL');
  }, 40_000);
  await Promise.all(exits);
  clearTimeout(killTimer);
  if (redis !== null) await redis.stop();
  say('stopped');
  process.exit(exitCode);
}

process.on('SIGINT', () => {
  if (stopping) {
    say('second interrupt: killing everything');
    for (const c of children.values()) c.kill('SIGKILL');
    redis?.process.kill('SIGKILL');
    process.exit(130);
  }
  void stop();
});
process.on('SIGTERM', () => void stop());
// whatever happens to this process, don't leave detached children behind
process.on('exit', () => {
  for (const c of children.values()) c.kill('SIGKILL');
  if (redis !== null && redis.process.exitCode === null) redis.process.kill('SIGKILL');
});

const gatewayMain = 'services/gateway/dist/main.js';
const hasGateway = existsSync(join(root, gatewayMain));
const started = [
  launch('encoder', 'services/encoder-worker/dist/main.js', 'encoder worker started'),
  launch('decoder', 'services/decoder-worker/dist/main.js', 'decoder worker started'),
];
if (hasGateway) started.push(launch('gateway', gatewayMain, null));
else say(`${gatewayMain} is not built: starting the workers only`);
try {
  await Promise.all(started);
} catch (err) {
  if (!stopping) fail(err.message);
  await new Promise(() => undefined); // stop() exits
}

const base = `http://127.0.0.1:${port}`;
let modelName = process.env.CSA2_MODEL_NAME || basename(modelDir);
if (hasGateway) {
  const deadline = Date.now() + 60_000;
  let ready = false;
  while (!ready && !stopping && Date.now() < deadline) {
    try {
      ready = (await fetch(`${base}/readyz`)).ok;
    } catch {
      // not listening yet
    }
    if (!ready) await new Promise((r) => setTimeout(r, 250));
  }
  if (stopping) await new Promise(() => undefined);
  if (!ready) {
    process.stderr.write(`[start] the gateway did not become ready at ${base}/readyz within 60 s\n`);
    exitCode = 1;
    await stop();
  }
  try {
    const models = await (await fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${apiKey}` } })).json();
    modelName = models?.data?.[0]?.id ?? modelName;
  } catch {
    // keep the default name
  }
}

const body = JSON.stringify({ model: modelName, prompt: 'Long documents, asked many times.', max_tokens: 24, stream: true });
process.stdout.write(
  [
    '',
    'csa2-serve is running',
    `  gateway  ${hasGateway ? base : '(not built)'}`,
    `  API key  ${apiKey}   (tenant ${apiKeys.split(',')[0]?.split(':').at(-1)})`,
    `  model    ${modelName}  (${modelDir}${modelDir === join(root, 'models/v41-mini-128k') ? '; an early training checkpoint, see its MODEL_CARD.md' : ''})`,
    `  redis    ${redisUrl}${redis !== null ? '  (local, in-memory: gone when this stops)' : ''}`,
    `  store    ${storeUrl}`,
    `  status   ${base}/   (operator key ${operatorKey}: the browser asks for it as the password)`,
    `  API docs ${base}/docs   (OpenAPI 3.1: ${base}/openapi.json)`,
    '',
    'try it:',
    `  curl -N ${base}/v1/completions -H 'Authorization: Bearer ${apiKey}' -H 'Content-Type: application/json' \\`,
    `    -d '${body}'`,
    '',
    '  # Python (pip install openai)',
    '  from openai import OpenAI',
    `  client = OpenAI(base_url="${base}/v1", api_key="${apiKey}")`,
    `  for chunk in client.completions.create(model="${modelName}", prompt="Long documents, asked many times.", max_tokens=24, stream=True):`,
    '      print(chunk.choices[0].text, end="", flush=True)',
    '',
    '  // Node (npm install openai)',
    `  const client = new (await import('openai')).default({ baseURL: '${base}/v1', apiKey: '${apiKey}' });`,
    `  const r = await client.chat.completions.create({ model: '${modelName}', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 24 });`,
    '  console.log(r.choices[0].message.content, r.usage);',
    '',
    'Ctrl-C stops everything.',
    '',
  ].join('\n'),
);
