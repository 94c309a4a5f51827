/**
 * @module routes/documents.list.test
 * GET /v1/documents: a tenant's documents (ready ones from their manifests, queued and failed ones
 * from their prefill jobs), each as GET /v1/documents/:id answers it, in pages (limit, after,
 * has_more, first_id, last_id) that join up to the whole listing; other tenants' documents and prompt
 * artifacts never appear; bad parameters are 400 naming the parameter.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { UnrecoverableError, formatFailure } from '@csa2/jobs';
import { KEY_B, TENANT_A, TENANT_B, fakeEncoder, get, post, startHarness, waitFor, writeManifest, type Harness } from '../testing/harness.js';

type Doc = Record<string, unknown>;
interface Page {
  object: string;
  data: Doc[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

describe('GET /v1/documents', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  const list = async (query = '', key?: string): Promise<[number, Page]> => {
    const res = await h.app.request(...get(`/v1/documents${query}`, key));
    return [res.status, (await res.json()) as Page];
  };

  test('lists ready, queued and failed documents of the tenant only, as GET /:id shows each, in id order (ids extended by "-" first)', async () => {
    // ready: manifests (as an encoder writes them)
    for (const id of ['b', 'a', 'a-b', 'a_c', 'Z9', 'c']) await writeManifest(h, TENANT_A, id, 10, 8);
    await writeManifest(h, TENANT_B, 'other-tenant', 5);
    await writeManifest(h, TENANT_A, 'prompt-req-1', 200); // a long prompt's artifact: not a document
    // failed and queued or encoding: prefill jobs ('bad' fails; the encoder holds anything else)
    fakeEncoder(h, async (job) => {
      if (job.data.kind === 'document' && job.data.documentId.startsWith('bad'))
        throw new UnrecoverableError(formatFailure('input-invalid', 'not for this model'));
      await new Promise(() => undefined); // holds anything else
      return { documentId: '', tokens: 0, bytesWritten: 0, artifactBytes: 0, reusedTokens: 0 };
    });
    assert.equal((await h.app.request(...post('/v1/documents', { id: 'bad', text: 'x' }))).status, 202);
    await waitFor('failed', async () => {
      const res = await h.app.request(...get('/v1/documents/bad'));
      return ((await res.json()) as Doc)['status'] === 'failed' ? true : undefined;
    });
    assert.equal((await h.app.request(...post('/v1/documents', { id: 'q-1', token_ids: [1, 2, 3] }, KEY_B))).status, 202, 'tenant B');

    const [code, page] = await list();
    assert.equal(code, 200);
    assert.equal(page.object, 'list');
    const ids = page.data.map((d) => d['id']);
    assert.deepEqual(ids, ['Z9', 'a-b', 'a', 'a_c', 'b', 'bad', 'c']);
    assert.deepEqual([page.first_id, page.last_id, page.has_more], ['Z9', 'c', false]);
    for (const doc of page.data) {
      const one = await h.app.request(...get(`/v1/documents/${String(doc['id'])}`));
      assert.deepEqual(doc, await one.json(), `${String(doc['id'])} is listed as GET /:id shows it`);
    }
    assert.deepEqual(page.data.find((d) => d['id'] === 'bad')?.['status'], 'failed');
    assert.deepEqual(page.data.find((d) => d['id'] === 'a')?.['status'], 'ready');

    const [, other] = await list('', KEY_B);
    assert.deepEqual(
      other.data.map((d) => d['id']),
      ['other-tenant', 'q-1'],
    );
    assert.ok(['queued', 'encoding'].includes(String(other.data[1]?.['status'])), 'q-1 exists only as its prefill job (held by the encoder)');
  });

  test('pages of `limit` join up to the whole listing; `after` need not be a listed id', async () => {
    for (let i = 0; i < 23; i++) await writeManifest(h, TENANT_A, `p${String(i).padStart(2, '0')}`, 3, 8);
    const [, whole] = await list('?limit=100');
    assert.equal(whole.has_more, false);
    const all = whole.data.map((d) => String(d['id']));
    assert.equal(all.length, 7 + 23);
    const [, first] = await list();
    assert.equal(first.data.length, 20, 'the default page is 20');
    assert.equal(first.has_more, true);
    for (const limit of [1, 7, 30]) {
      const joined: string[] = [];
      let cursor: string | null = null;
      for (;;) {
        const [, page]: [number, Page] = await list(`?limit=${limit}${cursor === null ? '' : `&after=${cursor}`}`);
        assert.ok(page.data.length <= limit);
        for (const d of page.data) joined.push(String(d['id']));
        assert.equal(page.last_id, page.data.at(-1)?.['id'] ?? null);
        if (!page.has_more) break;
        cursor = page.last_id;
      }
      assert.deepEqual(joined, all, `pages of ${limit}`);
    }
    const [, afterP1] = await list('?after=p10x&limit=3');
    assert.deepEqual(
      afterP1.data.map((d) => d['id']),
      ['p11', 'p12', 'p13'],
    );
    const [, past] = await list('?after=zzz');
    assert.deepEqual([past.data, past.first_id, past.last_id, past.has_more], [[], null, null, false]);
  });

  test('bad parameters are 400 invalid_request_error naming the parameter', async () => {
    for (const [query, param] of [
      ['?limit=0', 'limit'],
      ['?limit=101', 'limit'],
      ['?limit=ten', 'limit'],
      ['?limit=1.5', 'limit'],
      ['?after=has%20space', 'after'],
      ['?order=desc', 'order'],
    ] as const) {
      const res = await h.app.request(...get(`/v1/documents${query}`));
      assert.equal(res.status, 400, query);
      const body = (await res.json()) as { error: Doc };
      assert.equal(body.error['type'], 'invalid_request_error', query);
      assert.equal(body.error['param'], param, query);
    }
    assert.equal((await h.app.request(...get('/v1/documents', null))).status, 401, 'a key is needed');
    assert.equal((await list('?order=asc&limit=1'))[0], 200);
  });
});
