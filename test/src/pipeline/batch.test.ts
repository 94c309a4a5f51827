/**
 * The Batch API as users run it: the official `openai` client (files.create, batches.create /
 * retrieve / list / cancel, files.content) against the real pipeline (gateway, encoder and decoder
 * workers as processes, real Redis, a filesystem store). Every batch line's answer is compared with
 * the same request made directly (greedy), and the gateway and the decoder are killed mid-batch.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { Queue, DECODE_QUEUE, connectRedis, type Redis } from '@csa2/jobs';
import { API_KEY, OTHER_API_KEY, Pipeline } from '../harness/pipeline.js';

let pipe: Pipeline;
let client: OpenAI;
let redis: Redis;
let decodeQueue: Queue;

before(async () => {
  pipe = await Pipeline.start({
    env: { CSA2_BATCH_POLL_MS: '100', CSA2_BATCH_WINDOW_LINES: '2', CSA2_BATCH_LOCK_DURATION_MS: '3000', CSA2_BATCH_STALLED_INTERVAL_MS: '1000' },
  });
  client = new OpenAI({ apiKey: API_KEY, baseURL: `${pipe.url}/v1`, maxRetries: 0, timeout: 60_000 });
  redis = connectRedis(pipe.redis.url);
  decodeQueue = new Queue(DECODE_QUEUE, { connection: redis });
});
after(async () => {
  await decodeQueue?.close();
  redis?.disconnect();
  await pipe?.stop();
});

function e2e(name: string, fn: () => Promise<void>): void {
  test(name, { timeout: 240_000 }, async () => {
    try {
      await fn();
    } catch (err) {
      pipe.dumpLogs();
      throw err;
    }
  });
}

type Line = { custom_id: string; method: 'POST'; url: string; body: Record<string, unknown> };

async function runBatch(
  lines: readonly Line[],
  endpoint: '/v1/completions' | '/v1/chat/completions',
  onProgress?: (b: OpenAI.Batch) => Promise<void>,
): Promise<{ batch: OpenAI.Batch; output: any[]; errors: any[] }> {
  const file = await client.files.create({ file: await toFile(Buffer.from(lines.map((l) => JSON.stringify(l)).join('\n')), 'batch.jsonl'), purpose: 'batch' });
  assert.equal(file.purpose, 'batch');
  let batch = await client.batches.create({ input_file_id: file.id, endpoint, completion_window: '24h' });
  assert.equal(batch.status, 'validating');
  const deadline = Date.now() + 200_000;
  while (!['completed', 'failed', 'expired', 'cancelled'].includes(batch.status) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    batch = await client.batches.retrieve(batch.id);
    if (onProgress !== undefined) await onProgress(batch);
  }
  const read = async (id: string | null | undefined) =>
    id
      ? (await (await client.files.content(id)).text())
          .split('\n')
          .filter((l) => l !== '')
          .map((l) => JSON.parse(l))
      : [];
  return { batch, output: await read(batch.output_file_id), errors: await read(batch.error_file_id) };
}

const GREEDY = { temperature: 0, max_tokens: 12 } as const;

e2e('a completions batch through the official client: every line equals the same request made directly', async () => {
  const prompts = ['The first question: ', 'Second, ', 'Third and last: ', 'x'.repeat(40)];
  const lines: Line[] = prompts.map((prompt, i) => ({
    custom_id: `c-${i}`,
    method: 'POST',
    url: '/v1/completions',
    body: { model: 'tiny', prompt, ...GREEDY },
  }));
  const { batch, output, errors } = await runBatch(lines, '/v1/completions');
  assert.equal(batch.status, 'completed');
  assert.deepEqual(batch.request_counts, { total: 4, completed: 4, failed: 0 });
  assert.equal(errors.length, 0);
  assert.deepEqual(
    output.map((o) => o.custom_id),
    lines.map((l) => l.custom_id),
  );
  for (const [i, prompt] of prompts.entries()) {
    const direct = await client.completions.create({ model: 'tiny', prompt, ...GREEDY });
    assert.equal(output[i].response.status_code, 200);
    assert.equal(output[i].response.body.choices[0].text, direct.choices[0]?.text, `line ${i}`);
    assert.deepEqual(output[i].response.body.usage, direct.usage);
  }
  const listed = await client.batches.list({ limit: 10 });
  assert.ok(listed.data.some((b) => b.id === batch.id));
  // another tenant can neither see the batch nor its files
  const other = new OpenAI({ apiKey: OTHER_API_KEY, baseURL: `${pipe.url}/v1`, maxRetries: 0 });
  await assert.rejects(other.batches.retrieve(batch.id), (err: unknown) => err instanceof OpenAI.APIError && err.status === 404);
  await assert.rejects(other.files.content(batch.output_file_id as string), (err: unknown) => err instanceof OpenAI.APIError && err.status === 404);
});

e2e('a chat batch: each line equals the direct chat completion', async () => {
  const conversations = [
    [{ role: 'user' as const, content: 'Hello there' }],
    [
      { role: 'system' as const, content: 'Be brief.' },
      { role: 'user' as const, content: 'What is CSA2?' },
    ],
  ];
  const lines: Line[] = conversations.map((messages, i) => ({
    custom_id: `chat-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model: 'tiny', messages, ...GREEDY },
  }));
  const { batch, output } = await runBatch(lines, '/v1/chat/completions');
  assert.equal(batch.status, 'completed');
  for (const [i, messages] of conversations.entries()) {
    const direct = await client.chat.completions.create({ model: 'tiny', messages, ...GREEDY });
    assert.equal(output[i].response.body.object, 'chat.completion');
    assert.equal(output[i].response.body.choices[0].message.content, direct.choices[0]?.message.content);
  }
});

e2e('a documents batch ingests; questions on the document (batched and direct) agree and share its artifact', async () => {
  const text = 'A stored document about sparse attention and compressed caches. '.repeat(20);
  const file = await client.files.create({
    file: await toFile(
      Buffer.from([{ custom_id: 'doc', method: 'POST', url: '/v1/documents', body: { id: 'batch-e2e-doc', text } }].map((l) => JSON.stringify(l)).join('\n')),
      'docs.jsonl',
    ),
    purpose: 'batch',
  });
  const docs = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/documents' as '/v1/completions', completion_window: '24h' });
  const question = (q: string): Record<string, unknown> => ({ model: 'tiny', prompt: q, document_id: 'batch-e2e-doc', ...GREEDY });
  const asks = [' Question: what is it about?', ' Question: how long is it?'];
  // the questions' batch is created while the document is still being ingested: its lines wait
  const { batch, output } = await runBatch(
    asks.map((q, i) => ({ custom_id: `ask-${i}`, method: 'POST', url: '/v1/completions', body: question(q) })),
    '/v1/completions',
  );
  let ingest = await client.batches.retrieve(docs.id);
  while (ingest.status !== 'completed') {
    assert.ok(!['failed', 'expired', 'cancelled'].includes(ingest.status), JSON.stringify(ingest));
    await new Promise((r) => setTimeout(r, 200));
    ingest = await client.batches.retrieve(docs.id);
  }
  const [docLine] = (await (await client.files.content(ingest.output_file_id as string)).text())
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l));
  assert.equal(docLine.response.body.status, 'ready');
  assert.equal(docLine.response.body.tokens, Buffer.byteLength(text) + 0);
  assert.equal(batch.status, 'completed');
  for (const [i, q] of asks.entries()) {
    const direct = await client.completions.create(question(q) as unknown as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(output[i].response.body.choices[0].text, direct.choices[0]?.text);
    assert.equal(output[i].response.body.usage.prompt_tokens_details.cached_tokens, docLine.response.body.tokens, 'served from the stored artifact');
  }
});

e2e('cancel through the official client: cancelling → cancelled, finished lines kept, the rest written off', async () => {
  const lines: Line[] = Array.from({ length: 12 }, (_, i) => ({
    custom_id: `k-${i}`,
    method: 'POST',
    url: '/v1/completions',
    body: { model: 'tiny', prompt: `cancel me ${i} `, temperature: 0, max_tokens: 48 },
  }));
  const file = await client.files.create({ file: await toFile(Buffer.from(lines.map((l) => JSON.stringify(l)).join('\n')), 'cancel.jsonl'), purpose: 'batch' });
  let batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/completions', completion_window: '24h' });
  while (batch.status === 'validating' || (batch.status === 'in_progress' && (batch.request_counts?.completed ?? 0) < 1)) {
    await new Promise((r) => setTimeout(r, 100));
    batch = await client.batches.retrieve(batch.id);
  }
  const cancelling = await client.batches.cancel(batch.id);
  assert.ok(['cancelling', 'cancelled'].includes(cancelling.status), cancelling.status);
  while (batch.status !== 'cancelled') {
    await new Promise((r) => setTimeout(r, 200));
    batch = await client.batches.retrieve(batch.id);
  }
  const counts = batch.request_counts as OpenAI.BatchRequestCounts;
  assert.equal(counts.total, 12);
  assert.equal(counts.completed + counts.failed, 12);
  assert.ok(counts.completed >= 1 && counts.completed < 12, JSON.stringify(counts));
  const errors = (await (await client.files.content(batch.error_file_id as string)).text())
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l));
  assert.ok(errors.every((e) => e.error.code === 'batch_cancelled'));
});

e2e('SIGKILL of the gateway and of the decoder mid-batch: no line lost, none run twice, every text equals the direct request', async () => {
  const prompts = Array.from({ length: 10 }, (_, i) => `restart safety line ${i}: `);
  const lines: Line[] = prompts.map((prompt, i) => ({
    custom_id: `r-${i}`,
    method: 'POST',
    url: '/v1/completions',
    body: { model: 'tiny', prompt, temperature: 0, max_tokens: 32 },
  }));
  let killedGateway = false;
  let killedDecoder = false;
  const { batch, output, errors } = await runBatch(lines, '/v1/completions', async (b) => {
    const done = b.request_counts?.completed ?? 0;
    if (!killedGateway && done >= 2) {
      killedGateway = true;
      await pipe.kill('gateway', 'SIGKILL');
      await pipe.startService('gateway');
    } else if (killedGateway && !killedDecoder && done >= 5) {
      killedDecoder = true;
      await pipe.kill('decoder', 'SIGKILL');
      void pipe.startService('decoder');
    }
  });
  assert.ok(killedGateway && killedDecoder, 'both kills happened mid-batch');
  assert.equal(batch.status, 'completed', JSON.stringify(batch));
  assert.deepEqual(batch.request_counts, { total: 10, completed: 10, failed: 0 });
  assert.equal(errors.length, 0);
  assert.deepEqual(
    output.map((o) => o.custom_id),
    lines.map((l) => l.custom_id),
  );
  const stem = batch.id.slice('batch_'.length);
  for (const [i, prompt] of prompts.entries()) {
    const direct = await client.completions.create({ model: 'tiny', prompt, temperature: 0, max_tokens: 32 });
    assert.equal(output[i].response.body.choices[0].text, direct.choices[0]?.text, `line ${i}`);
    // one decode job per line, under its first attempt: the restarted gateway re-added the same job ids
    assert.equal(output[i].response.request_id, `cmpl-${stem}-${i}-1`);
    const job = await decodeQueue.getJob(`req.cmpl-${stem}-${i}-1.decode`);
    assert.ok(job !== undefined, `line ${i}'s decode job`);
    assert.equal(await decodeQueue.getJob(`req.cmpl-${stem}-${i}-2.decode`), undefined, `line ${i} never needed a second attempt`);
  }
});
