#!/usr/bin/env node
/**
 * A timeline of N concurrent streamed completions through the pipeline (gateway, queue, one batching decoder
 * worker; the tiny test model), after 3 warm-up rounds: per request the client's send, the decode job's
 * enqueue and start (BullMQ job timestamps), its stream's first, second and last token entries (Redis Stream
 * ids are millisecond timestamps), and when the client saw its first token and its end, all in ms from the
 * round's start; then the decoder worker's own account from its 'decode done' log (queueMs, toEngineMs,
 * firstTokenMs, enginePrefillMs). PIPE_ENV: a JSON object of extra environment for the services (e.g.
 * '{"CSA2_DECODE_LATENCY_FACTOR":"1000"}'). A diagnostic, not a bench suite.
 *
 *   npm run build && node bench/tools/pipeline-timeline.mjs [N]
 */
import { Pipeline, API_KEY } from '@csa2/test';
import { createRequire } from 'node:module';
const req = createRequire(import.meta.resolve('@csa2/jobs'));
const { Redis } = await import(req.resolve('ioredis'));
const { Queue } = await import(req.resolve('bullmq'));
const N = Number(process.argv[2] ?? 8);
const pipe = await Pipeline.start({ env: process.env.PIPE_ENV ? JSON.parse(process.env.PIPE_ENV) : {} });
const redis = new Redis(pipe.redis.url);
const body = (i) => ({
  model: 'tiny',
  prompt: `Stream ${i} of the concurrency probe: `,
  max_tokens: 64,
  temperature: 0.8,
  seed: i,
  stream: true,
  ignore_eos: true,
});
async function one(i, T0) {
  const t0 = Date.now();
  const r = await fetch(`${pipe.url}/v1/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify(body(i)),
  });
  const reader = r.body.getReader();
  let first = 0;
  let id = null;
  const dec = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const t = dec.decode(value);
    if (!id) {
      const m = t.match(/"id":"([^"]+)"/);
      if (m) id = m[1];
    }
    if (!first && t.includes('"text"')) first = Date.now();
  }
  return { i, id, sent: t0 - T0, first: first - T0, end: Date.now() - T0 };
}
for (let k = 0; k < 3; k++) await Promise.all(Array.from({ length: N }, (_, i) => one(i, Date.now())));
const T0 = Date.now();
const res = await Promise.all(Array.from({ length: N }, (_, i) => one(i, T0)));
const q = new Queue('csa2-decode', { connection: new Redis(pipe.redis.url, { maxRetriesPerRequest: null }) });
const jobs = await q.getJobs(['completed'], 0, 100);
for (const r of res) {
  const j = jobs.find((x) => JSON.stringify(x.data).includes(r.id));
  const entries = await redis.xrange(`csa2:stream:${r.id}`, '-', '+');
  const ts = entries.map(([eid]) => Number(eid.split('-')[0]) - T0);
  console.log(
    `req ${r.i} ${r.id}: sent ${r.sent} enq ${j ? j.timestamp - T0 : '?'} start ${j ? j.processedOn - T0 : '?'} | stream entries first ${ts[0]} second ${ts[1]} last ${ts[ts.length - 1]} (${ts.length}) | client first ${r.first} end ${r.end}`,
  );
}
for (const line of pipe.logLines())
  if (line.includes('decode done') && res.some((r) => line.includes(r.id))) {
    const j = JSON.parse(line.slice(line.indexOf('{')));
    console.log(`  ${j.requestId}: queue ${j.queueMs} to engine ${j.toEngineMs} first token ${j.firstTokenMs} engine prefill ${j.enginePrefillMs}`);
  }
await q.close();
redis.disconnect();
await pipe.stop();
process.exit(0);
