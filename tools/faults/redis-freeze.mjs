#!/usr/bin/env node
// Fault 3 (tools/faults/README.md): Redis frozen (SIGSTOP) for 7 s while 20 streamed completions of 300 tokens are in
// flight. Prints how the 20 clients ended, how many tokens the workers still generated for them after
// Redis came back, and how long a new 4-token request then took.
// Usage: node tools/faults/redis-freeze.mjs [freeze seconds = 7]
import { connectRedis, readStreamState } from '../../packages/csa2-jobs/dist/index.js';
import { Pipeline, fmt, postJson, sleep } from './lib.mjs';

const freezeMs = Number(process.argv[2] ?? 7) * 1000;
const pipe = await Pipeline.start();
const redis = connectRedis(pipe.redis.url);
try {
  const ends = [];
  const ids = [];
  const clients = Array.from({ length: 20 }, async (_, i) => {
    const r = await postJson(pipe, '/v1/completions', { model: 'tiny', prompt: `freeze ${i} `, max_tokens: 300, ignore_eos: true, stream: true });
    const text = await r.text();
    ends.push(text.includes('[DONE]') ? 'done' : (/"error":\{"message":"([^"]{0,60})/.exec(text)?.[1] ?? 'cut'));
  });
  await sleep(1500);
  const pid = pipe.redis.process.pid;
  process.kill(pid, 'SIGSTOP');
  await sleep(freezeMs);
  process.kill(pid, 'SIGCONT');
  const thawedAt = Date.now();
  await Promise.all(clients);
  const counts = {};
  for (const e of ends) counts[e] = (counts[e] ?? 0) + 1;
  console.log(
    `20 clients after a ${freezeMs / 1000} s freeze: ${JSON.stringify(counts)} (answered ${fmt((Date.now() - thawedAt) / 1000)} s after Redis came back)`,
  );
  for (const key of await redis.keys('bull:csa2-decode:req.*.decode')) ids.push(key.slice('bull:csa2-decode:req.'.length, -'.decode'.length));
  const t0 = Date.now();
  const small = await postJson(pipe, '/v1/completions', { model: 'tiny', prompt: 'after the freeze ', max_tokens: 4 });
  await small.text();
  console.log(`a new 4-token request after recovery: ${small.status} in ${fmt((Date.now() - t0) / 1000)} s`);
  await sleep(3000);
  let tokens = 0;
  const finals = {};
  for (const id of ids) {
    const s = await readStreamState(redis, id);
    tokens += s.tokenIds.length;
    const end = s.end === null ? 'open' : s.end.kind === 'final' ? s.end.finishReason : `error:${s.end.code}`;
    finals[end] = (finals[end] ?? 0) + 1;
  }
  console.log(`their streams 3 s later: ${tokens} tokens in all (${ids.length} streams seen), ends ${JSON.stringify(finals)}`);
} finally {
  redis.disconnect();
  await pipe.stop();
}
