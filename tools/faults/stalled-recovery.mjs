#!/usr/bin/env node
// Fault 7 (tools/faults/README.md): a decoder worker is SIGKILLed mid-stream with the default lock duration and stalled
// interval (the harness's short test values are unset); a new decoder starts at once. Prints the time
// from the kill to the next token the client gets, and what the client's stream carried meanwhile
// (SSE comments). Usage: node tools/faults/stalled-recovery.mjs [runs = 1]
import { Pipeline, fmt, postJson } from './lib.mjs';

const runs = Number(process.argv[2] ?? 1);
const pipe = await Pipeline.start({ env: { CSA2_LOCK_DURATION_MS: '', CSA2_STALLED_INTERVAL_MS: '' } });
try {
  for (let run = 0; run < runs; run++) {
    const r = await postJson(pipe, '/v1/completions', { model: 'tiny', prompt: `stall ${run} `, max_tokens: 3000, ignore_eos: true, stream: true });
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffered = '';
    let tokens = 0;
    let killedAt = 0;
    let resumedAt = 0;
    const comments = [];
    while (resumedAt === 0) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffered.indexOf('\n\n')) >= 0) {
        const event = buffered.slice(0, cut);
        buffered = buffered.slice(cut + 2);
        if (event.startsWith(':')) {
          // consecutive equal comments are shown once, with the time of the first
          if (killedAt > 0 && comments.at(-1)?.event !== event) comments.push({ atS: (Date.now() - killedAt) / 1000, event });
          continue;
        }
        tokens++;
        if (killedAt > 0 && resumedAt === 0) resumedAt = Date.now();
        if (tokens === 20 && killedAt === 0) {
          await pipe.kill('decoder', 'SIGKILL');
          killedAt = Date.now();
          void pipe.startService('decoder');
        }
      }
    }
    await reader.cancel().catch(() => undefined);
    console.log(
      `run ${run + 1}: decoder killed after 20 tokens; next token ${resumedAt > 0 ? `${fmt((resumedAt - killedAt) / 1000)} s later` : 'never (stream ended)'}`,
    );
    console.log(
      `  the client's stream meanwhile (from the kill; repeats left out): ${comments.length === 0 ? 'nothing' : comments.map((c) => `${fmt(c.atS)} s ${c.event}`).join(' | ')}`,
    );
  }
} finally {
  await pipe.stop();
}
