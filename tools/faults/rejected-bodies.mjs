#!/usr/bin/env node
// Fault 8 (tools/faults/README.md): N concurrent 16 MiB documents that the gateway must reject for their length (the test
// model's context is 4096 tokens). Prints the gateway's RSS before and its peak (VmHWM) after, and the
// slowest answer. Usage: node tools/faults/rejected-bodies.mjs [N=32]
import { Pipeline, fmt, postJson, processMemoryMb } from './lib.mjs';

const n = Number(process.argv[2] ?? 32);
const pipe = await Pipeline.start({ services: ['gateway'] });
try {
  const pid = pipe.processes('gateway')[0].pid;
  const before = processMemoryMb(pid);
  const body = JSON.stringify({ text: 'a'.repeat(16 * 1024 * 1024 - 64) });
  const t0 = Date.now();
  const answers = await Promise.all(
    Array.from({ length: n }, async () => {
      try {
        const r = await postJson(pipe, '/v1/documents', body);
        const text = await r.text();
        return { status: r.status, ms: Date.now() - t0, message: text.slice(0, 160) };
      } catch (err) {
        return { status: `error (${err.cause?.code ?? err.message})`, ms: Date.now() - t0, message: String(err.cause ?? err) };
      }
    }),
  );
  let after = { rssMb: NaN, peakMb: NaN };
  try {
    after = processMemoryMb(pid);
  } catch {
    console.log('the gateway process is gone:');
    pipe.dumpLogs();
  }
  const statuses = {};
  for (const a of answers) statuses[a.status] = (statuses[a.status] ?? 0) + 1;
  console.log(`${n} x 16 MiB documents: statuses ${JSON.stringify(statuses)}; slowest answer ${fmt(Math.max(...answers.map((a) => a.ms)) / 1000)} s`);
  console.log(`gateway RSS: ${fmt(before.rssMb, 0)} MB before, peak ${fmt(after.peakMb, 0)} MB (VmHWM), ${fmt(after.rssMb, 0)} MB after`);
  console.log(`first answer: ${answers[0]?.message}`);
} finally {
  await pipe.stop();
}
