#!/usr/bin/env node
// Fault 2 (tools/faults/README.md): a 16,000-token streamed completion whose client leaves after 0.5 s (during its prefill).
// Prints how many of its tokens the encoder still encoded, and whether its prompt artifact is left in
// the store and readable as a document. Usage: node tools/faults/prompt-cancel.mjs
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connectRedis } from '../../packages/csa2-jobs/dist/index.js';
import { API_KEY, Pipeline, postJson, seededTestModel, sleep } from './lib.mjs';

const modelRoot = mkdtempSync(join(tmpdir(), 'csa2-faults-model-'));
const modelDir = await seededTestModel(modelRoot, 20_000);
const pipe = await Pipeline.start({ modelDir });
const redis = connectRedis(pipe.redis.url);
try {
  const abort = new AbortController();
  const r = postJson(pipe, '/v1/completions', { model: 'tiny', prompt: 'x '.padEnd(16_000, 'a long prompt '), max_tokens: 8, stream: true }, API_KEY, {
    signal: abort.signal,
  });
  await sleep(500);
  abort.abort();
  await r.then((res) => res.text()).catch(() => undefined);
  const [jobKey] = await redis.keys('bull:csa2-prefill:req.*.prefill');
  const requestId = jobKey.slice('bull:csa2-prefill:req.'.length, -'.prefill'.length);
  let state = '';
  for (let i = 0; i < 600; i++) {
    state = (await redis.hget(jobKey, 'finishedOn')) !== null ? 'finished' : 'running';
    if (state === 'finished') break;
    await sleep(100);
  }
  await sleep(1500);
  const progress = JSON.parse((await redis.hget(jobKey, 'progress')) ?? 'null');
  const returnvalue = JSON.parse((await redis.hget(jobKey, 'returnvalue')) ?? 'null');
  console.log(`client left after 0.5 s; the prefill job ${state}: progress ${JSON.stringify(progress)}, result ${JSON.stringify(returnvalue)}`);
  const storeDir = fileURLToPath(pipe.storeUrl);
  const manifest = join(storeDir, 'tenants/acme/documents', `prompt-${requestId}`, 'manifest.json');
  console.log(
    `prompt manifest in the store: ${existsSync(manifest) ? 'yes' : 'no'}; documents dir: ${existsSync(join(storeDir, 'tenants/acme/documents')) ? readdirSync(join(storeDir, 'tenants/acme/documents')).join(', ') : '(none)'}`,
  );
  const get = await fetch(`${pipe.url}/v1/documents/prompt-${requestId}`, { headers: { authorization: `Bearer ${API_KEY}` } });
  console.log(`GET /v1/documents/prompt-${requestId.slice(0, 8)}…: ${get.status} ${(await get.text()).slice(0, 160)}`);
} finally {
  redis.disconnect();
  await pipe.stop();
  rmSync(modelRoot, { recursive: true, force: true });
}
