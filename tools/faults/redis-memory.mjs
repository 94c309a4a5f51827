#!/usr/bin/env node
// Fault 9 (tools/faults/README.md), and the rule that big token lists go through the object store: what finished requests
// leave in Redis. Three rounds of 20 requests against the whole pipeline, each answered before Redis is
// measured (INFO memory used_memory): completions with four ~4 MiB stop strings, long prompts (3,500
// tokens: the prefill route), and 20 documents of 4,000 tokens. Usage: node tools/faults/redis-memory.mjs
import { connectRedis } from '../../packages/csa2-jobs/dist/index.js';
import { Pipeline, fmt, postJson, redisMemoryMb, sleep } from './lib.mjs';

const pipe = await Pipeline.start();
const redis = connectRedis(pipe.redis.url);
try {
  const base = await redisMemoryMb(redis);
  console.log(`Redis used_memory at start: ${fmt(base)} MB`);
  const round = async (what, send) => {
    const before = await redisMemoryMb(redis);
    const statuses = {};
    await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const r = await send(i);
        statuses[r.status] = (statuses[r.status] ?? 0) + 1;
        await r.text();
      }),
    );
    await sleep(500);
    const after = await redisMemoryMb(redis);
    console.log(`${what}: statuses ${JSON.stringify(statuses)}; Redis ${fmt(before)} -> ${fmt(after)} MB (+${fmt(after - before)} MB)`);
  };
  const stop = (i) => Array.from({ length: 4 }, (_, k) => `${'~'.repeat(4 * 1024 * 1024 - 64)}${i}-${k}`);
  await round('20 completions, 4 stop strings of 4 MiB', (i) =>
    postJson(pipe, '/v1/completions', { model: 'tiny', prompt: `stop test ${i} `, max_tokens: 4, stop: stop(i) }),
  );
  await round('20 long prompts (3,500 tokens)', (i) =>
    postJson(pipe, '/v1/completions', { model: 'tiny', prompt: `${i} `.padEnd(3500, 'long prompt text '), max_tokens: 4 }),
  );
  const ids = Array.from({ length: 20 }, (_, i) => `mem-doc-${i}`);
  await round('20 documents (4,000 tokens)', (i) => postJson(pipe, '/v1/documents', { id: ids[i], text: `${i} `.padEnd(4000, 'document text ') }));
  for (;;) {
    const states = await Promise.all(
      ids.map(async (id) => (await (await fetch(`${pipe.url}/v1/documents/${id}`, { headers: { authorization: 'Bearer test-key-acme-0001' } })).json()).status),
    );
    if (states.every((s) => s === 'ready' || s === 'failed')) break;
    await sleep(500);
  }
  console.log(`after the 20 documents are ready: Redis ${fmt(await redisMemoryMb(redis))} MB`);
  // the biggest job payloads left in the queues' job hashes (BullMQ's 'data' field)
  for (const queue of ['csa2-prefill', 'csa2-decode']) {
    const keys = (await redis.keys(`bull:${queue}:*`)).filter((k) => (k.match(/:/g) ?? []).length === 2);
    let max = 0;
    let total = 0;
    let n = 0;
    for (const k of keys) {
      if ((await redis.type(k)) !== 'hash') continue;
      const len = await redis.hstrlen(k, 'data');
      if (len === 0) continue;
      n++;
      total += len;
      max = Math.max(max, len);
    }
    console.log(`${queue}: ${n} job records, payload bytes total ${total}, largest ${max}`);
  }
} finally {
  redis.disconnect();
  await pipe.stop();
}
