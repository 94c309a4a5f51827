/**
 * Chaos suite: recovery after a worker is SIGKILLed under load, and prefill that no
 * document holds up, through the whole pipeline as processes (redis-server, gateway, encoder and
 * decoder workers, a filesystem store, a seeded tiny model). Behaviour only — nothing lost, nothing
 * duplicated, the texts of an undisturbed run, and which job started before which other ended (read
 * from BullMQ's own job records); the times are printed as diagnostics, and measured by
 * `npm run bench -- recovery` and `npm run bench -- fairness` on the served model.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectRedis, readStreamState, type Redis } from '@csa2/jobs';
import { API_KEY, OTHER_API_KEY, Pipeline, seededTestModel } from '../harness/pipeline.js';
import { getJson, postJson, readSse, until, type SseRead } from './support.js';

let pipe: Pipeline;
let redis: Redis;
let modelRoot: string;

before(async () => {
  modelRoot = mkdtempSync(join(tmpdir(), 'csa2-recovery-model-'));
  const modelDir = await seededTestModel(modelRoot, 24_000);
  pipe = await Pipeline.start({ modelDir, env: { CSA2_PROGRESS_INTERVAL_MS: '0', CSA2_MAX_TOKENS: '512' } });
  redis = connectRedis(pipe.redis.url);
  redis.on('error', () => undefined);
});

after(async () => {
  redis?.disconnect();
  await pipe?.stop();
  if (modelRoot !== undefined) rmSync(modelRoot, { recursive: true, force: true });
});

function chaos(name: string, fn: (t: { diagnostic(msg: string): void }) => Promise<void>): void {
  test(name, { timeout: 240_000 }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      pipe.dumpLogs();
      throw err;
    }
  });
}

/** Deterministic token ids of a byte-vocabulary text (the harness model's tokenizer is bytes). */
function text(n: number, seed: number): string {
  const words = ['alpha ', 'bravo ', 'charlie ', 'delta ', 'echo ', 'foxtrot ', 'golf ', 'hotel '];
  let x = seed;
  let out = '';
  while (out.length < n) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out += words[x % words.length];
  }
  return out.slice(0, n);
}

/** BullMQ's record of a job: when its last attempt started (processedOn) and when it ended (finishedOn). */
async function jobTimes(queue: string, jobId: string): Promise<{ processedOn: number | null; finishedOn: number | null }> {
  const [p, f] = await redis.hmget(`bull:${queue}:${jobId}`, 'processedOn', 'finishedOn');
  return { processedOn: p === null ? null : Number(p), finishedOn: f === null ? null : Number(f) };
}

/** The prefill job of a long prompt, by its request id, once the gateway queued it. */
async function promptJobIds(before: Set<string>, count: number): Promise<string[]> {
  return until(`${count} prompt prefill jobs`, async () => {
    const ids = (await redis.keys('bull:csa2-prefill:req.*.prefill')).map((k) => k.slice('bull:csa2-prefill:'.length)).filter((id) => !before.has(id));
    return ids.length >= count ? ids : undefined;
  });
}

async function documentsEncoding(ids: readonly string[], key = API_KEY): Promise<void> {
  await until(
    `documents ${ids.join(', ')} encoding`,
    async () => {
      const s = await Promise.all(ids.map(async (id) => (await getJson(pipe, `/v1/documents/${id}`, key)).body));
      return s.every((b) => b['status'] === 'encoding' && Number((b['progress'] as { tokens_done?: number } | undefined)?.tokens_done ?? 0) > 0)
        ? true
        : undefined;
    },
    60_000,
    50,
  );
}

async function documentsReady(ids: readonly string[], key = API_KEY): Promise<Record<string, unknown>[]> {
  return until(
    `documents ${ids.join(', ')} ready`,
    async () => {
      const s = await Promise.all(ids.map(async (id) => (await getJson(pipe, `/v1/documents/${id}`, key)).body));
      for (const b of s) assert.notEqual(b['status'], 'failed', JSON.stringify(b));
      return s.every((b) => b['status'] === 'ready') ? s : undefined;
    },
    180_000,
    200,
  );
}

function completionTokens(sse: SseRead): number | undefined {
  const usage = JSON.parse(sse.data.at(-2)?.data ?? 'null') as { usage?: { completion_tokens?: number } } | null;
  return usage?.usage?.completion_tokens;
}

function streamText(sse: SseRead): string {
  return sse.data
    .filter((d) => d.data !== '[DONE]')
    .map((d) => (JSON.parse(d.data) as { choices?: { text?: string }[] }).choices?.[0]?.text ?? '')
    .join('');
}

chaos('a decoder SIGKILLed under 20 streams: every stream ends with all its tokens, once each, the text of an undisturbed run', async (t) => {
  const bodies = Array.from({ length: 20 }, (_, i) => ({
    model: 'tiny',
    prompt: `stream ${i}: ${text(40, i)}`,
    max_tokens: 120,
    ignore_eos: true,
    temperature: 0,
  }));
  const streams = await Promise.all(
    bodies.map(async (b) =>
      readSse(
        await postJson(pipe, '/v1/completions', { ...b, stream: true, stream_options: { include_usage: true } }, API_KEY, {
          signal: AbortSignal.timeout(200_000),
        }),
      ),
    ),
  );
  await until('every stream has tokens', async () => (streams.every((s) => s.data.length >= 5) ? true : undefined), 60_000);
  await pipe.kill('decoder', 'SIGKILL');
  const killedAt = Date.now();
  await pipe.startService('decoder');
  await Promise.all(streams.map((s) => s.done));
  const doneAt = Math.max(...streams.map((s) => s.data.at(-1)?.atMs ?? 0));
  t.diagnostic(`all 20 streams ended ${doneAt - killedAt} ms after the kill (harness lock 3 s, stalled check 1 s)`);
  const again = await Promise.all(
    bodies.map(async (b) => ((await (await postJson(pipe, '/v1/completions', b)).json()) as { choices: { text: string }[] }).choices[0]?.text),
  );
  streams.forEach((s, i) => {
    assert.equal(s.data.at(-1)?.data, '[DONE]', `stream ${i} ended`);
    assert.equal(completionTokens(s), 120, `stream ${i}: every token, once`);
    assert.equal(streamText(s), again[i], `stream ${i}: the undisturbed text`);
  });
});

chaos(
  'an encoder SIGKILLed while documents encode and long prompts wait: everything completes once, and the restarted encoder starts the prompts before any document ends',
  async (t) => {
    const before = new Set((await redis.keys('bull:csa2-prefill:req.*.prefill')).map((k) => k.slice('bull:csa2-prefill:'.length)));
    const documents = Array.from({ length: 4 }, (_, i) => ({ id: `kill-doc-${i}`, text: text(20_000, 100 + i) }));
    assert.equal((await postJson(pipe, '/v1/documents', { documents })).status, 202);
    await documentsEncoding(documents.map((d) => d.id));
    const prompts = await Promise.all(
      [0, 1].map(async (i) =>
        readSse(
          await postJson(
            pipe,
            '/v1/completions',
            {
              model: 'tiny',
              prompt: `prompt ${i}: ${text(2600, 200 + i)}`,
              max_tokens: 16,
              ignore_eos: true,
              stream: true,
              stream_options: { include_usage: true },
            },
            API_KEY,
            { signal: AbortSignal.timeout(200_000) },
          ),
        ),
      ),
    );
    const promptJobs = await promptJobIds(before, 2);
    await pipe.kill('encoder', 'SIGKILL');
    const killedAt = Date.now();
    await pipe.startService('encoder');
    await Promise.all(prompts.map((s) => s.done));
    const ready = await documentsReady(documents.map((d) => d.id));
    const documentEnds = await Promise.all(documents.map(async (d) => (await jobTimes('csa2-prefill', `doc.acme.${d.id}`)).finishedOn));
    const promptStarts = await Promise.all(promptJobs.map(async (id) => (await jobTimes('csa2-prefill', id)).processedOn));
    t.diagnostic(
      `from the kill: prompts' prefill started at ${promptStarts.map((s) => (s ?? 0) - killedAt).join(', ')} ms, ended at ${prompts.map((s) => (s.data.at(-1)?.atMs ?? 0) - killedAt).join(', ')} ms; documents ready at ${documentEnds.map((e) => (e ?? 0) - killedAt).join(', ')} ms`,
    );
    prompts.forEach((s, i) => {
      assert.equal(s.data.at(-1)?.data, '[DONE]', `prompt ${i} ended`);
      assert.equal(completionTokens(s), 16, `prompt ${i}: every token, once`);
    });
    ready.forEach((b, i) => assert.equal(b['tokens'], documents[i]?.text.length, `document ${i}: every token`));
    for (const id of promptJobs) {
      const requestId = id.slice('req.'.length, -'.prefill'.length);
      const state = await readStreamState(redis, requestId);
      assert.equal(state.tokenIds.length, 16, 'the stream holds each token once');
      assert.equal((await redis.keys(`bull:csa2-decode:req.${requestId}.decode`)).length, 1, 'one decode job');
    }
    const firstDocumentEnd = Math.min(...documentEnds.map((e) => e ?? Number.POSITIVE_INFINITY));
    for (const s of promptStarts)
      assert.ok(s !== null && s < firstDocumentEnd, `a prompt's prefill started (${s}) before the first document ended (${firstDocumentEnd})`);
  },
);

chaos(
  "one tenant floods the prefill queue with documents: another tenant's long prompt and its document start in reserved slots before any running document ends",
  async (t) => {
    const flood = Array.from({ length: 12 }, (_, i) => ({ id: `fair-flood-${i}`, text: text(16_000, 300 + i) }));
    assert.equal((await postJson(pipe, '/v1/documents', { documents: flood })).status, 202);
    await until('four flood documents encoding', async () => ((await redis.llen('bull:csa2-prefill:active')) >= 4 ? true : undefined), 60_000, 20);
    const runningFlood = await redis.lrange('bull:csa2-prefill:active', 0, -1);
    const before = new Set((await redis.keys('bull:csa2-prefill:req.*.prefill')).map((k) => k.slice('bull:csa2-prefill:'.length)));
    const answer = postJson(pipe, '/v1/completions', { model: 'tiny', prompt: text(2600, 400), max_tokens: 4 }, OTHER_API_KEY, {
      signal: AbortSignal.timeout(200_000),
    });
    assert.equal((await postJson(pipe, '/v1/documents', { id: 'small-other', text: text(1000, 401) }, OTHER_API_KEY)).status, 202);
    const [promptJob] = await promptJobIds(before, 1);
    assert.equal((await answer).status, 200);
    await documentsReady(['small-other'], OTHER_API_KEY);
    const promptStart = (await jobTimes('csa2-prefill', promptJob as string)).processedOn;
    const documentStart = (await jobTimes('csa2-prefill', 'doc.other.small-other')).processedOn;
    await documentsReady(flood.map((d) => d.id));
    const floodEnds = await Promise.all(runningFlood.map(async (id) => (await jobTimes('csa2-prefill', id)).finishedOn ?? 0));
    assert.ok(
      floodEnds.every((e) => e > 0),
      'the flood documents that ran ended',
    );
    const firstFloodEnd = Math.min(...floodEnds);
    t.diagnostic(
      `other's prompt started ${(promptStart ?? 0) - firstFloodEnd} ms and its document ${(documentStart ?? 0) - firstFloodEnd} ms relative to the first end of the ${runningFlood.length} running flood documents`,
    );
    assert.ok(promptStart !== null && promptStart < firstFloodEnd, 'the prompt did not wait for a flood document to end');
    assert.ok(documentStart !== null && documentStart < firstFloodEnd, 'the document did not wait for a flood document to end');
  },
);
