#!/usr/bin/env node
// Fault 10 (tools/faults/README.md): one tenant's three batch POSTs queue many documents; then another tenant sends a
// 2,100-token prompt (the prefill route) and a short completion. Prints how long the second tenant
// waited for each answer (capped), and how many of the first tenant's documents were still not ready.
// Usage: node tools/faults/tenant-fairness.mjs [documents per batch = 32] [cap seconds = 60]
import { API_KEY, OTHER_API_KEY, Pipeline, fmt, postJson } from './lib.mjs';

const perBatch = Number(process.argv[2] ?? 32);
const capMs = Number(process.argv[3] ?? 60) * 1000;
const pipe = await Pipeline.start();
try {
  const t0 = Date.now();
  for (let b = 0; b < 3; b++) {
    const documents = Array.from({ length: perBatch }, (_, i) => ({ id: `flood-${b}-${i}`, text: `${b}/${i} `.padEnd(1600, 'a flood of documents ') }));
    const r = await postJson(pipe, '/v1/documents', { documents }, API_KEY);
    if (r.status !== 202) console.log(`batch ${b}: ${r.status} ${(await r.text()).slice(0, 200)}`);
    else await r.text();
  }
  console.log(`tenant acme queued ${3 * perBatch} documents (${3 * perBatch * 1600} tokens) in ${fmt((Date.now() - t0) / 1000, 2)} s`);
  const timed = async (what, body) => {
    const start = Date.now();
    try {
      const r = await postJson(pipe, '/v1/completions', body, OTHER_API_KEY, { signal: AbortSignal.timeout(capMs) });
      const out = await r.json();
      return `${what}: ${r.status} after ${fmt((Date.now() - start) / 1000)} s${r.status !== 200 ? ` ${JSON.stringify(out).slice(0, 160)}` : ''}`;
    } catch (err) {
      return `${what}: no answer within ${capMs / 1000} s (${err.name})`;
    }
  };
  const results = await Promise.all([
    timed('tenant other, 2,100-token prompt', { model: 'tiny', prompt: 'q '.padEnd(2100, 'question text '), max_tokens: 4 }),
    timed('tenant other, 8-token prompt', { model: 'tiny', prompt: 'hello!!!', max_tokens: 4 }),
  ]);
  for (const line of results) console.log(line);
  let pending = 0;
  for (let b = 0; b < 3; b++) {
    for (let i = 0; i < perBatch; i++) {
      const s = (await (await fetch(`${pipe.url}/v1/documents/flood-${b}-${i}`, { headers: { authorization: `Bearer ${API_KEY}` } })).json()).status;
      if (s !== 'ready') pending++;
    }
  }
  console.log(`tenant acme documents not ready yet when the answers came: ${pending} of ${3 * perBatch}`);
  // decode: tenant acme keeps 40 long generations queued; tenant other asks for 4 tokens
  const flood = Array.from({ length: 40 }, (_, i) =>
    postJson(pipe, '/v1/completions', { model: 'tiny', prompt: `flood ${i} `, max_tokens: 200, ignore_eos: true }, API_KEY).then((r) => r.text()),
  );
  await new Promise((r) => setTimeout(r, 1000));
  console.log(await timed('decode: tenant other, 8-token prompt behind 40 x 200 tokens of tenant acme', { model: 'tiny', prompt: 'hello!!!', max_tokens: 4 }));
  await Promise.allSettled(flood);
} finally {
  await pipe.stop();
}
