/**
 * Files and Batch API against a private redis-server, a temporary store and fake workers (real
 * BullMQ workers on the real queues writing real stream entries): the file lifecycle, a batch's
 * states and files, bad lines, the batch flow, retries of transient failures, documents lines,
 * cancel, expiry, and a driver restart that loses no line and runs none twice.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { DECODE_QUEUE, fairStateKey, formatFailure, UnrecoverableError, type DecodeJob } from '@csa2/jobs';
import { startBatchDrivers, type BatchDrivers } from '../batch/batch-worker.js';
import {
  KEY_A,
  KEY_B,
  MODEL_NAME,
  TENANT_A,
  fakeDecoder,
  fakeEncoder,
  finalEntry,
  get,
  post,
  startHarness,
  tokenEntries,
  waitFor,
  writeEntries,
  writeManifest,
  type Harness,
} from '../testing/harness.js';

type Json = Record<string, any>;

function jsonl(lines: readonly unknown[]): string {
  return `${lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n')}\n`;
}

function completionLine(customId: string, prompt: string, extra: Json = {}): Json {
  return { custom_id: customId, method: 'POST', url: '/v1/completions', body: { model: MODEL_NAME, prompt, max_tokens: 8, temperature: 0, ...extra } };
}

describe('Files and Batch API', () => {
  let h: Harness;
  let drivers: BatchDrivers;
  /** Every decode job the fake decoder started, by request id (a line run twice would show twice). */
  const runs: DecodeJob[] = [];
  const priorities = new Map<string, number | undefined>();
  /** Prompts whose first attempt fails with a transient error entry. */
  const failOnce = new Set<string>();
  /** Prompts the decoder holds until their cancel key appears. */
  const hold = new Set<string>();
  /** Lines of the restart test from 4 on wait for this (they are mid-flight while the drivers restart). */
  let openGate: () => void = () => undefined;
  const gate = new Promise<void>((r) => (openGate = r));

  const promptOf = (job: DecodeJob): string => Buffer.from(job.promptIds.filter((id) => id < 256)).toString('latin1');

  async function upload(text: string, key = KEY_A, filename = 'input.jsonl'): Promise<Response> {
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([text]), filename);
    return h.app.request('http://gateway.test/v1/files', { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form });
  }

  async function createBatch(text: string, endpoint = '/v1/completions', window = '24h'): Promise<Json> {
    const file = (await (await upload(text)).json()) as Json;
    const res = await h.app.request(...post('/v1/batches', { input_file_id: file['id'], endpoint, completion_window: window, metadata: { job: 'test' } }));
    assert.equal(res.status, 200, await res.clone().text());
    return (await res.json()) as Json;
  }

  async function batchOf(id: string): Promise<Json> {
    return (await (await h.app.request(...get(`/v1/batches/${id}`))).json()) as Json;
  }

  async function settled(id: string, timeoutMs = 20_000): Promise<Json> {
    return waitFor(
      `batch ${id} to end`,
      async () => {
        const b = await batchOf(id);
        return ['completed', 'failed', 'expired', 'cancelled'].includes(b['status'] as string) ? b : undefined;
      },
      timeoutMs,
    );
  }

  async function fileLines(fileId: string | null): Promise<Json[]> {
    if (fileId === null) return [];
    const res = await h.app.request(...get(`/v1/files/${fileId}/content`));
    assert.equal(res.status, 200);
    return (await res.text())
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Json);
  }

  before(async () => {
    h = await startHarness({
      CSA2_BATCH_POLL_MS: '50',
      CSA2_BATCH_WINDOW_LINES: '3',
      CSA2_BATCH_CANCEL_WAIT_MS: '3000',
      CSA2_BATCH_LOCK_DURATION_MS: '2000',
      CSA2_BATCH_STALLED_INTERVAL_MS: '1000',
    });
    drivers = await startBatchDrivers(h.deps);
    fakeDecoder(h, async (job, redis) => {
      const data = job.data;
      runs.push(data);
      priorities.set(data.requestId, job.opts.priority);
      const prompt = promptOf(data);
      if (failOnce.has(prompt) && data.requestId.endsWith('-1')) {
        await writeEntries(redis, data.requestId, [{ kind: 'error', code: 'store-unavailable', message: 'the store blinked' }]);
        return;
      }
      const restartLine = /^restart (\d+)$/.exec(prompt);
      if (restartLine !== null && Number(restartLine[1]) >= 4) await gate;
      if (hold.has(prompt)) {
        await waitFor('cancel key', async () => ((await redis.exists(`csa2:cancel:${data.requestId}`)) === 1 ? true : undefined), 15_000);
        await writeEntries(redis, data.requestId, [finalEntry(data, 0, { finishReason: 'cancelled' })]);
        return;
      }
      const text = `<${prompt.trim().toUpperCase()}>`;
      await writeEntries(redis, data.requestId, [
        ...tokenEntries(text),
        finalEntry(data, text.length, { finishReason: 'length', cachedTokens: data.documentId !== null ? 5 : 0 }),
      ]);
    });
    fakeEncoder(h, async (job) => {
      const data = job.data;
      if (data.kind !== 'document') throw new UnrecoverableError('unexpected prompt job');
      const ids = 'tokenIds' in data.input ? data.input.tokenIds : [];
      if (Buffer.from(ids).toString('latin1').includes('poison'))
        throw new UnrecoverableError(formatFailure('input-invalid', 'the encoder refused this document'));
      await new Promise((r) => setTimeout(r, 150));
      await writeManifest(h, data.tenant, data.documentId, ids.length);
      return { documentId: data.documentId, tokens: ids.length, bytesWritten: 10, artifactBytes: 10, reusedTokens: 0 };
    });
  });
  after(async () => {
    await drivers?.close();
    await h?.close();
  });

  test('files: upload, retrieve, list, content, delete; tenant-scoped; bad uploads refused with the field named', async () => {
    const text = jsonl([completionLine('a', 'x')]);
    const res = await upload(text, KEY_A, 'my input.jsonl');
    assert.equal(res.status, 200);
    const file = (await res.json()) as Json;
    assert.match(String(file['id']), /^file-/);
    assert.deepEqual(
      { ...file, id: null, created_at: null },
      {
        id: null,
        object: 'file',
        bytes: Buffer.byteLength(text),
        created_at: null,
        filename: 'my input.jsonl',
        purpose: 'batch',
        status: 'processed',
        status_details: null,
        expires_at: null,
      },
    );
    assert.deepEqual(await (await h.app.request(...get(`/v1/files/${file['id']}`))).json(), file);
    assert.equal(await (await h.app.request(...get(`/v1/files/${file['id']}/content`))).text(), text);
    const list = (await (await h.app.request(...get('/v1/files?purpose=batch'))).json()) as Json;
    assert.equal(list['object'], 'list');
    assert.ok((list['data'] as Json[]).some((f) => f['id'] === file['id']));
    // another tenant sees nothing of it
    assert.equal((await h.app.request(...get(`/v1/files/${file['id']}`, KEY_B))).status, 404);
    assert.equal((await h.app.request(...get(`/v1/files/${file['id']}/content`, KEY_B))).status, 404);
    assert.ok(!((await (await h.app.request(...get('/v1/files', KEY_B))).json()) as Json)['data'].some((f: Json) => f['id'] === file['id']));
    assert.equal((await h.app.request(...get(`/v1/files/${file['id']}`, KEY_B, 'DELETE'))).status, 404);
    // delete
    const del = await h.app.request(...get(`/v1/files/${file['id']}`, KEY_A, 'DELETE'));
    assert.deepEqual(await del.json(), { id: file['id'], object: 'file', deleted: true });
    assert.equal((await h.app.request(...get(`/v1/files/${file['id']}`))).status, 404);

    const bad = async (body: FormData | string, contentType?: string): Promise<Json> => {
      const r = await h.app.request('http://gateway.test/v1/files', {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY_A}`, ...(contentType !== undefined ? { 'content-type': contentType } : {}) },
        body,
      });
      assert.equal(r.status, 400);
      return ((await r.json()) as Json)['error'] as Json;
    };
    const form = (purpose: string | null, content: string | null): FormData => {
      const f = new FormData();
      if (purpose !== null) f.append('purpose', purpose);
      if (content !== null) f.append('file', new Blob([content]), 'f.jsonl');
      return f;
    };
    assert.equal((await bad(form('fine-tune', text)))['param'], 'purpose');
    assert.equal((await bad(form(null, text)))['param'], 'purpose');
    assert.equal((await bad(form('batch', null)))['param'], 'file');
    assert.equal((await bad(form('batch', '\n\n')))['code'], 'empty_file');
    assert.equal((await bad('{"purpose": "batch"}', 'application/json'))['code'], 'invalid_content_type');
  });

  test('a completions batch: validating → in_progress → finalizing → completed; output in line order, bad lines in the error file', async () => {
    const text = jsonl([
      completionLine('q1', 'alpha'),
      'this is not json',
      completionLine('q2', 'beta', { max_tokens: 0 }),
      completionLine('q3', 'gamma'),
      { custom_id: 'q4', method: 'POST', url: '/v1/chat/completions', body: { model: MODEL_NAME, messages: [] } },
      completionLine('q1', 'again'),
      completionLine('q5', 'delta', { stream: true }),
      completionLine('q6', 'epsilon', { model: 'other-model' }),
      completionLine('q7', 'zeta'),
    ]);
    const created = await createBatch(text);
    assert.equal(created['object'], 'batch');
    assert.match(String(created['id']), /^batch_/);
    assert.equal(created['status'], 'validating');
    assert.equal(created['endpoint'], '/v1/completions');
    assert.deepEqual(created['metadata'], { job: 'test' });
    const b = await settled(created['id'] as string);
    assert.equal(b['status'], 'completed', JSON.stringify(b));
    assert.deepEqual(b['request_counts'], { total: 9, completed: 3, failed: 6 });
    for (const f of ['in_progress_at', 'finalizing_at', 'completed_at']) assert.equal(typeof b[f], 'number', f);
    const out = await fileLines(b['output_file_id'] as string);
    assert.deepEqual(
      out.map((l) => l['custom_id']),
      ['q1', 'q3', 'q7'],
    );
    assert.deepEqual(
      out.map((l) => l['response']['body']['choices'][0]['text']),
      ['<ALPHA>', '<GAMMA>', '<ZETA>'],
    );
    for (const l of out) {
      assert.equal(l['response']['status_code'], 200);
      assert.equal(l['error'], null);
      assert.match(String(l['id']), /^batch_req_/);
      assert.equal(l['response']['body']['object'], 'text_completion');
      assert.equal(l['response']['request_id'], l['response']['body']['id']);
    }
    const errors = await fileLines(b['error_file_id'] as string);
    const byId = new Map(errors.map((e) => [String(e['custom_id']), e]));
    assert.equal(errors.length, 6);
    assert.equal(errors.find((e) => e['custom_id'] === null)?.['error']?.['code'], 'invalid_json_line');
    assert.equal(byId.get('q2')?.['response']?.['status_code'], 400);
    assert.equal(byId.get('q2')?.['response']?.['body']?.['error']?.['param'], 'max_tokens');
    assert.equal(byId.get('q4')?.['error']?.['code'], 'mismatched_endpoint');
    assert.equal(errors.filter((e) => e['error']?.['code'] === 'duplicate_custom_id').length, 1);
    assert.equal(byId.get('q5')?.['response']?.['body']?.['error']?.['param'], 'stream');
    assert.equal(byId.get('q6')?.['response']?.['body']?.['error']?.['code'], 'model_not_found');
    // every line ran once, fair-queued in the tenant's batch flow (interactive requests have their own)
    const ids = out.map((l) => l['response']['request_id'] as string);
    for (const id of ids) {
      assert.equal(runs.filter((r) => r.requestId === id).length, 1);
      assert.ok((priorities.get(id) ?? 0) >= 1, 'a fair-share priority');
    }
    assert.notEqual(await h.redis.hget(fairStateKey(DECODE_QUEUE), `f:${TENANT_A}/batch`), null, 'the batch flow holds a finish tag');
    assert.equal(await h.redis.hget(fairStateKey(DECODE_QUEUE), `f:${TENANT_A}`), null, 'the interactive flow was not charged');
    // the input file can be deleted once the batch ended; the listing shows the batch
    const list = (await (await h.app.request(...get('/v1/batches?limit=100'))).json()) as Json;
    assert.ok((list['data'] as Json[]).some((x) => x['id'] === b['id']));
    assert.equal((await h.app.request(...get(`/v1/batches/${b['id']}`, KEY_B))).status, 404);
    assert.equal((await h.app.request(...get(`/v1/files/${b['input_file_id']}`, KEY_A, 'DELETE'))).status, 200);
  });

  test('a transient line failure is retried under a new request id; the output holds the retry', async () => {
    failOnce.add('flaky');
    const b = await settled((await createBatch(jsonl([completionLine('f', 'flaky')])))['id'] as string);
    assert.deepEqual(b['request_counts'], { total: 1, completed: 1, failed: 0 });
    const [line] = await fileLines(b['output_file_id'] as string);
    assert.equal(line?.['response']['body']['choices'][0]['text'], '<FLAKY>');
    assert.match(String(line?.['response']['request_id']), /-2$/);
    assert.equal(b['error_file_id'], null);
  });

  test('documents lines ingest in the batch flow; completions naming a document still encoding wait for it', async () => {
    const docs = await createBatch(
      jsonl([
        { custom_id: 'd1', method: 'POST', url: '/v1/documents', body: { id: 'batch-doc', text: 'some document text' } },
        { custom_id: 'd2', method: 'POST', url: '/v1/documents', body: { id: 'batch-doc', text: 'some document text' } },
        { custom_id: 'd3', method: 'POST', url: '/v1/documents', body: { text: 'poison' } },
      ]),
      '/v1/documents',
    );
    // the questions' batch starts while the document is still being ingested
    const questions = await createBatch(jsonl([completionLine('ask', 'question', { document_id: 'batch-doc' })]));
    const d = await settled(docs['id'] as string);
    assert.deepEqual(d['request_counts'], { total: 3, completed: 2, failed: 1 });
    const out = await fileLines(d['output_file_id'] as string);
    assert.deepEqual(
      out.map((l) => [l['custom_id'], l['response']['body']['status'], l['response']['body']['id']]),
      [
        ['d1', 'ready', 'batch-doc'],
        ['d2', 'ready', 'batch-doc'],
      ],
    );
    const [err] = await fileLines(d['error_file_id'] as string);
    assert.equal(err?.['response']['status_code'], 400);
    assert.equal(err?.['response']['body']['error']['code'], 'input_invalid');
    const job = await h.deps.queues.prefill.getJob(`doc.${TENANT_A}.batch-doc`);
    assert.ok((job?.opts.priority ?? 0) >= 1, 'a fair-share priority');
    const q = await settled(questions['id'] as string);
    assert.deepEqual(q['request_counts'], { total: 1, completed: 1, failed: 0 });
    const [answer] = await fileLines(q['output_file_id'] as string);
    assert.equal(answer?.['response']['body']['usage']['prompt_tokens_details']['cached_tokens'], 5);
    assert.equal(runs.find((r) => r.requestId === answer?.['response']['request_id'])?.documentId, 'batch-doc');
  });

  test('cancel: running lines get their cancel keys, the rest is written off as batch_cancelled; an ended batch cannot be cancelled', async () => {
    hold.add('wait-here');
    const b = await createBatch(jsonl([completionLine('c0', 'quick'), ...Array.from({ length: 6 }, (_, i) => completionLine(`c${i + 1}`, 'wait-here'))]));
    const id = b['id'] as string;
    await waitFor('lines running', async () =>
      runs.filter((r) => promptOf(r) === 'wait-here' && r.requestId.includes(id.slice(6))).length >= 2 ? true : undefined,
    );
    const res = await h.app.request(...post(`/v1/batches/${id}/cancel`, {}));
    assert.equal(res.status, 200);
    assert.ok(['cancelling', 'cancelled'].includes(((await res.json()) as Json)['status'] as string));
    const end = await settled(id);
    assert.equal(end['status'], 'cancelled');
    assert.equal(typeof end['cancelling_at'], 'number');
    assert.equal(typeof end['cancelled_at'], 'number');
    assert.deepEqual(end['request_counts'], { total: 7, completed: 1, failed: 6 });
    const errors = await fileLines(end['error_file_id'] as string);
    assert.deepEqual(new Set(errors.map((e) => e['error']['code'])), new Set(['batch_cancelled']));
    assert.ok(errors.every((e) => e['response'] === null));
    const started = runs.filter((r) => promptOf(r) === 'wait-here' && r.requestId.includes(id.slice(6))).length;
    assert.ok(started >= 2 && started <= 3, `only one window of lines started (window 3, c0 freed one slot): ${started}`);
    const again = await h.app.request(...post(`/v1/batches/${id}/cancel`, {}));
    assert.equal(again.status, 409);
  });

  test('expiry: lines not done when the completion window ends are written off as batch_expired', async () => {
    hold.add('too-slow');
    const b = await createBatch(
      jsonl([completionLine('e1', 'too-slow'), completionLine('e2', 'too-slow'), completionLine('e3', 'too-slow'), completionLine('e4', 'too-slow')]),
      '/v1/completions',
      '2s',
    );
    const end = await settled(b['id'] as string);
    assert.equal(end['status'], 'expired');
    assert.equal(typeof end['expired_at'], 'number');
    assert.deepEqual(end['request_counts'], { total: 4, completed: 0, failed: 4 });
    const errors = await fileLines(end['error_file_id'] as string);
    assert.deepEqual(
      errors.map((e) => [e['custom_id'], e['error']['code']]),
      [
        ['e1', 'batch_expired'],
        ['e2', 'batch_expired'],
        ['e3', 'batch_expired'],
        ['e4', 'batch_expired'],
      ],
    );
    assert.equal(end['output_file_id'], null);
  });

  test('a driver restart mid-batch (shutdown hands it back, another driver takes over) loses no line and runs none twice', async () => {
    const lines = Array.from({ length: 9 }, (_, i) => completionLine(`r${i}`, `restart ${i}`));
    const b = await createBatch(jsonl(lines));
    const id = b['id'] as string;
    const stem = id.slice('batch_'.length);
    await waitFor('some lines done', async () => (((await batchOf(id))['request_counts']['completed'] as number) >= 2 ? true : undefined));
    await drivers.close();
    const midway = await batchOf(id);
    assert.equal(midway['status'], 'in_progress');
    drivers = await startBatchDrivers(h.deps);
    openGate();
    const end = await settled(id);
    assert.deepEqual(end['request_counts'], { total: 9, completed: 9, failed: 0 });
    const out = await fileLines(end['output_file_id'] as string);
    assert.deepEqual(
      out.map((l) => l['custom_id']),
      lines.map((l) => l['custom_id']),
    );
    assert.deepEqual(
      out.map((l) => l['response']['body']['choices'][0]['text']),
      lines.map((_, i) => `<RESTART ${i}>`),
    );
    const mine = runs.filter((r) => r.requestId.includes(stem));
    assert.equal(mine.length, 9, `each line's job ran once: ${mine.map((r) => r.requestId).join(', ')}`);
  });

  test('a batch cancelled before any driver took it: cancelled, its lines counted and written off, none run', async () => {
    await drivers.close();
    const b = await createBatch(jsonl([completionLine('n1', 'never run'), completionLine('n2', 'never run')]));
    const id = b['id'] as string;
    assert.equal(((await (await h.app.request(...post(`/v1/batches/${id}/cancel`, {}))).json()) as Json)['status'], 'cancelling');
    drivers = await startBatchDrivers(h.deps);
    const end = await settled(id);
    assert.equal(end['status'], 'cancelled');
    assert.deepEqual(end['request_counts'], { total: 2, completed: 0, failed: 2 });
    assert.deepEqual(
      (await fileLines(end['error_file_id'] as string)).map((e) => [e['custom_id'], e['error']['code']]),
      [
        ['n1', 'batch_cancelled'],
        ['n2', 'batch_cancelled'],
      ],
    );
    assert.equal(runs.filter((r) => r.requestId.includes(id.slice(6))).length, 0);
  });

  test('bad batch requests name the field; an unknown or foreign file is a 404', async () => {
    const file = (await (await upload(jsonl([completionLine('a', 'x')]))).json()) as Json;
    const bad = async (body: Json, status = 400): Promise<Json> => {
      const r = await h.app.request(...post('/v1/batches', body));
      assert.equal(r.status, status, await r.clone().text());
      return ((await r.json()) as Json)['error'] as Json;
    };
    assert.equal((await bad({ input_file_id: file['id'], endpoint: '/v1/embeddings', completion_window: '24h' }))['param'], 'endpoint');
    assert.equal((await bad({ input_file_id: file['id'], endpoint: '/v1/completions', completion_window: 'tomorrow' }))['param'], 'completion_window');
    assert.equal((await bad({ input_file_id: file['id'], endpoint: '/v1/completions', completion_window: '9999h' }))['param'], 'completion_window');
    assert.equal((await bad({ endpoint: '/v1/completions', completion_window: '24h' }))['param'], 'input_file_id');
    assert.equal((await bad({ input_file_id: 'file-nope', endpoint: '/v1/completions', completion_window: '24h' }, 404))['code'], 'file_not_found');
    const r = await h.app.request(...post('/v1/batches', { input_file_id: file['id'], endpoint: '/v1/completions', completion_window: '24h' }, KEY_B));
    assert.equal(r.status, 404);
    assert.equal((await h.app.request(...get('/v1/batches/batch_nope'))).status, 404);
    assert.equal((await h.app.request(...get('/v1/batches?limit=0'))).status, 400);
  });
});
