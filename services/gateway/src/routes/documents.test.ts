import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { getTokenList, manifestObjectKey } from '@csa2/artifacts';
import { MAX_INLINE_TOKEN_IDS, UnrecoverableError, documentJobId, formatFailure, type DocumentPrefillJob } from '@csa2/jobs';
import { ingestDocument } from '../documents.js';
import { KEY_B, MODEL_NAME, TENANT_A, TENANT_B, fakeEncoder, get, post, startHarness, waitFor, writeManifest, type Harness } from '../testing/harness.js';
import { sweepPromptArtifacts } from '../prompt-artifacts.js';

type Doc = Record<string, unknown>;

describe('documents: ingest, status lifecycle, delete, tenant scoping', () => {
  let h: Harness;
  /** Documents the fake encoder holds at "encoding" until the test releases them. */
  const gates = new Map<string, () => void>();
  const encoded: DocumentPrefillJob[] = [];

  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    for (const open of gates.values()) open();
    await h.close();
  });

  const status = async (id: string, key?: string): Promise<[number, Doc]> => {
    const res = await h.app.request(...get(`/v1/documents/${id}`, key));
    return [res.status, (await res.json()) as Doc];
  };

  function startEncoder(): void {
    fakeEncoder(h, async (job) => {
      const data = job.data;
      if (data.kind !== 'document') throw new UnrecoverableError('not a document job');
      encoded.push(data);
      if (data.documentId.startsWith('bad'))
        throw new UnrecoverableError(
          formatFailure('artifact-corrupt', 'chunk tenants/tenant-a/chunks/9f8e7d6c5b4a: checksum mismatch (stored 0a1b2c3d, computed 4e5f6a7b)'),
        );
      const total = 'tokenIds' in data.input ? data.input.tokenIds.length : 0;
      await job.updateProgress({ tokensDone: 4, tokensTotal: total });
      await new Promise<void>((resolve) => gates.set(data.documentId, resolve));
      await writeManifest(h, data.tenant, data.documentId, total, 8, data.acceptedAtMs);
      return { documentId: data.documentId, tokens: total, bytesWritten: total * 100, artifactBytes: total * 100, reusedTokens: 0 };
    });
  }

  test('POST one document → 202 queued with its token count; the prefill job carries the tokens', async () => {
    const res = await h.app.request(...post('/v1/documents', { id: 'guide', text: 'hello world' }));
    assert.equal(res.status, 202);
    const body = (await res.json()) as Doc;
    assert.deepEqual({ ...body, created_at: 0 }, { id: 'guide', object: 'document', status: 'queued', created_at: 0, tokens: 11 });
    const job = await h.deps.queues.prefill.getJob(documentJobId(TENANT_A, 'guide'));
    assert.ok(job);
    assert.deepEqual(job.data, { ...job.data, kind: 'document', tenant: TENANT_A, documentId: 'guide', input: { tokenIds: [...Buffer.from('hello world')] } });
    assert.deepEqual(await status('guide'), [200, body]);
  });

  test('queued → encoding (with progress) → ready (tokens, bytes from the manifest); created_at stays the same', async () => {
    const createdAt = (await status('guide'))[1]['created_at'];
    startEncoder();
    const encoding = await waitFor('encoding', async () => {
      const [code, doc] = await status('guide');
      assert.equal(code, 200);
      return doc['status'] === 'encoding' && doc['progress'] !== undefined && (doc['progress'] as Doc)['tokens_done'] === 4 ? doc : undefined;
    });
    assert.deepEqual(encoding['progress'], { tokens_done: 4, tokens_total: 11 });
    assert.equal(encoding['created_at'], createdAt);
    gates.get('guide')?.();
    const ready = await waitFor('ready', async () => {
      const [, doc] = await status('guide');
      return doc['status'] === 'ready' ? doc : undefined;
    });
    assert.equal(ready['tokens'], 11);
    assert.equal(ready['bytes'], 1100);
    assert.equal(ready['created_at'], createdAt);
    const metrics = await (await h.app.request('http://gateway.test/metrics')).text();
    assert.match(metrics, /^csa2_artifact_bytes_total\{kind="document"\} 1100$/m);
    assert.match(metrics, /^csa2_queue_wait_seconds_count\{queue="prefill"\} 1$/m);
    assert.match(metrics, /^csa2_prefill_tokens_total\{kind="document"\} 11$/m);
  });

  test('posting a ready id again changes nothing (ids are immutable) and answers its status', async () => {
    const res = await h.app.request(...post('/v1/documents', { id: 'guide', text: 'something else' }));
    assert.equal(res.status, 202);
    assert.equal(((await res.json()) as Doc)['status'], 'ready');
    assert.equal(encoded.filter((d) => d.documentId === 'guide').length, 1);
  });

  test("other tenants see nothing: GET and DELETE of tenant A's document are 404 for tenant B", async () => {
    const [code, body] = await status('guide', KEY_B);
    assert.equal(code, 404);
    assert.deepEqual(body, { error: { message: "No document found with id 'guide'", type: 'not_found_error', param: 'id', code: 'document_not_found' } });
    const del = await h.app.request(...get('/v1/documents/guide', KEY_B, 'DELETE'));
    assert.equal(del.status, 404);
    assert.equal((await status('guide'))[1]['status'], 'ready');
  });

  test('a document being encoded cannot be deleted (409); once ready, DELETE removes manifest and job → 404', async () => {
    await h.app.request(...post('/v1/documents', { id: 'manual', token_ids: [1, 2, 3, 4, 5] }));
    await waitFor('encoding', async () => ((await status('manual'))[1]['status'] === 'encoding' ? true : undefined));
    const busy = await h.app.request(...get('/v1/documents/manual', undefined, 'DELETE'));
    assert.equal(busy.status, 409);
    assert.equal(((await busy.json()) as { error: Doc }).error['code'], 'document_busy');
    gates.get('manual')?.();
    await waitFor('ready', async () => ((await status('manual'))[1]['status'] === 'ready' ? true : undefined));
    await waitFor('job completed', async () =>
      (await h.deps.queues.prefill.getJobState(documentJobId(TENANT_A, 'manual'))) === 'completed' ? true : undefined,
    );

    const del = await h.app.request(...get('/v1/documents/manual', undefined, 'DELETE'));
    assert.equal(del.status, 200);
    assert.deepEqual(await del.json(), { id: 'manual', object: 'document.deleted', deleted: true });
    assert.equal(await h.store.head(manifestObjectKey(TENANT_A, 'manual')), null);
    assert.equal(await h.deps.queues.prefill.getJob(documentJobId(TENANT_A, 'manual')), undefined);
    assert.equal((await status('manual'))[0], 404);
    assert.equal((await h.app.request(...get('/v1/documents/manual', undefined, 'DELETE'))).status, 404);
  });

  test('a failed prefill → failed with the public reason of its code (not the worker text); posting the id again enqueues it again', async () => {
    await h.app.request(...post('/v1/documents', { id: 'bad-doc', text: 'x' }));
    const failed = await waitFor('failed', async () => {
      const [, doc] = await status('bad-doc');
      return doc['status'] === 'failed' ? doc : undefined;
    });
    assert.equal(failed['reason'], 'A stored artifact this request needs is damaged.');
    assert.equal(failed['error_code'], 'artifact_corrupt');
    assert.doesNotMatch(JSON.stringify(failed), /tenants|checksum|0a1b2c3d/, 'no internals');
    const again = await h.app.request(...post('/v1/documents', { id: 'bad-doc', text: 'x' }));
    assert.equal(((await again.json()) as Doc)['status'], 'queued');
    await waitFor('second attempt', async () => (encoded.filter((d) => d.documentId === 'bad-doc').length === 2 ? true : undefined));
  });

  test('POST many documents → 202 with a list (ids generated where absent); bad entries are refused as a whole', async () => {
    const res = await h.app.request(...post('/v1/documents', { documents: [{ text: 'first' }, { id: 'second', token_ids: [7, 8] }] }));
    assert.equal(res.status, 202);
    const body = (await res.json()) as { object: string; data: Doc[] };
    assert.equal(body.object, 'list');
    assert.equal(body.data.length, 2);
    assert.match(String(body.data[0]?.['id']), /^doc-[A-Za-z0-9_-]+$/);
    assert.equal(body.data[0]?.['tokens'], 5);
    assert.deepEqual(
      body.data.map((d) => d['status']),
      ['queued', 'queued'],
    );
    assert.equal(body.data[1]?.['id'], 'second');

    const bad = async (payload: unknown, param: string, statusCode = 400): Promise<void> => {
      const r = await h.app.request(...post('/v1/documents', payload));
      assert.equal(r.status, statusCode, JSON.stringify(payload));
      assert.equal(((await r.json()) as { error: Doc }).error['param'], param);
    };
    await bad({ documents: [{ text: 'ok' }, { text: 'a', token_ids: [1] }] }, 'documents[1].token_ids');
    await bad(
      {
        documents: [
          { id: 'dup', text: 'a' },
          { id: 'dup', text: 'b' },
        ],
      },
      'documents[1].id',
    );
    await bad({ documents: [] }, 'documents');
    await bad({ id: 'has space', text: 'a' }, 'id');
    await bad({ id: 'prompt-abc', text: 'a' }, 'id');
    await bad({ text: '' }, 'text');
    await bad({ token_ids: [1, 999] }, 'token_ids');
    await bad({ text: 'x'.repeat(300) }, 'text');
    // refused before it is tokenized (the byte count alone says so), with what is known of its length
    const long = await h.app.request(...post('/v1/documents', { text: 'x'.repeat(30_000) }));
    assert.equal(long.status, 400);
    assert.match(
      ((await long.json()) as { error: Doc }).error['message'] as string,
      /^The document has at least 30000 tokens; this server accepts at most 255/,
    );
    await bad({ text: 'a', model: 'other-model' }, 'model', 404);
    assert.equal(await h.deps.queues.prefill.getJob(documentJobId(TENANT_A, 'dup')), undefined);
  });

  test("a long prompt's artifact is never one of the tenant's documents: GET, DELETE and document_id answer 404", async () => {
    await writeManifest(h, TENANT_A, 'prompt-cmpl-abc', 30, 8);
    assert.equal((await status('prompt-cmpl-abc'))[0], 404);
    assert.equal((await h.app.request(...get('/v1/documents/prompt-cmpl-abc', undefined, 'DELETE'))).status, 404);
    assert.notEqual(await h.store.head(manifestObjectKey(TENANT_A, 'prompt-cmpl-abc')), null, 'DELETE did not touch it');
    const completion = await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: 'x', document_id: 'prompt-cmpl-abc' }));
    assert.equal(completion.status, 404);
    assert.equal(((await completion.json()) as { error: Doc }).error['code'], 'document_not_found');
  });

  test('prompt artifacts left in the store expire: a sweep deletes those older than the TTL, and nothing else', async () => {
    const hourAgo = Date.now() - 3600_000;
    await writeManifest(h, TENANT_A, 'prompt-cmpl-old', 10, 8, hourAgo);
    await writeManifest(h, TENANT_B, 'prompt-cmpl-old-b', 10, 8, hourAgo);
    await writeManifest(h, TENANT_A, 'prompt-cmpl-young', 10, 8);
    await writeManifest(h, TENANT_A, 'old-document', 10, 8, hourAgo);
    assert.equal(await sweepPromptArtifacts(h.deps, 600_000), 2, 'the two old ones, of both tenants');
    assert.equal(await h.store.head(manifestObjectKey(TENANT_A, 'prompt-cmpl-old')), null);
    assert.equal(await h.store.head(manifestObjectKey(TENANT_B, 'prompt-cmpl-old-b')), null);
    assert.notEqual(await h.store.head(manifestObjectKey(TENANT_A, 'prompt-cmpl-young')), null, 'its request may still be running');
    assert.notEqual(await h.store.head(manifestObjectKey(TENANT_A, 'old-document')), null, 'documents never expire');
  });

  test('a long document travels to the encoder through the object store, not the job payload; deleting it queued removes that too', async () => {
    // (called directly: this model's context is shorter than MAX_INLINE_TOKEN_IDS)
    const ids = Array.from({ length: MAX_INLINE_TOKEN_IDS + 904 }, (_, i) => (i * 31) % 256);
    await h.deps.queues.prefill.pause(); // it stays queued (the fake encoder would take it)
    const state = await ingestDocument(h.deps, TENANT_A, 'long-doc', ids, Date.now());
    assert.equal(state.status, 'queued');
    const job = await h.deps.queues.prefill.getJob(documentJobId(TENANT_A, 'long-doc'));
    assert.ok(job !== undefined);
    const input = (job.data as DocumentPrefillJob).input;
    assert.ok('tokensRef' in input, JSON.stringify(input).slice(0, 200));
    assert.ok(JSON.stringify(job.data).length < 1024, `payload of ${JSON.stringify(job.data).length} bytes`);
    assert.deepEqual(await getTokenList(h.store, TENANT_A, input.tokensRef), ids);
    assert.equal((await status('long-doc'))[1]['tokens'], ids.length, 'its status still counts its tokens');
    assert.equal((await h.app.request(...get('/v1/documents/long-doc', undefined, 'DELETE'))).status, 200);
    assert.equal(await h.store.head(input.tokensRef.key), null, 'the stored list went with the job');
    await h.deps.queues.prefill.resume();
  });

  test('a manifest written directly (an encoder elsewhere) makes the document ready for its tenant only', async () => {
    await writeManifest(h, TENANT_A, 'imported', 20, 8);
    const [code, doc] = await status('imported');
    assert.equal(code, 200);
    assert.equal(doc['status'], 'ready');
    assert.equal(doc['tokens'], 20);
    assert.equal((await status('imported', KEY_B))[0], 404);
  });
});
