/**
 * The status page in headless Chromium (Debian's chromium through playwright-core; scripts/test.mjs
 * installs it as ensure-redis does redis-server). A gateway app with fake workers holds documents
 * (ready, encoding, failed) and batches (running, completed) of two tenants and some traffic; the
 * operator sees all of it, a tenant key only its own, no key gets the 401 login page. Screenshots go
 * to .csa2/screenshots/ (git-ignored). The page loads nothing from anywhere but the gateway.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { serve } from '@hono/node-server';
import { chromium, type BrowserContext } from 'playwright-core';
import { UnrecoverableError, formatFailure } from '@csa2/jobs';
import { startBatchDrivers, type BatchDrivers } from '../batch/batch-worker.js';
import {
  KEY_A,
  KEY_B,
  MODEL_NAME,
  TENANT_A,
  TENANT_B,
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

const CHROMIUM = '/usr/bin/chromium';
const SCREENSHOTS = fileURLToPath(new URL('../../../../.csa2/screenshots/', import.meta.url));
const OPERATOR_KEY = 'sk-test-operator-0001';
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

describe('status page in headless Chromium', () => {
  let h: Harness;
  let drivers: BatchDrivers;
  let server: Server;
  let base: string;
  let profileDir: string;
  let release: () => void = () => undefined;
  const released = new Promise<void>((r) => (release = r));
  const contexts: BrowserContext[] = [];

  async function browse(credentials: { username: string; password: string } | null): Promise<BrowserContext> {
    const dir = mkdtempSync(join(profileDir, 'profile-'));
    const context = await chromium.launchPersistentContext(dir, {
      executablePath: CHROMIUM,
      headless: true,
      args: FLAGS,
      viewport: { width: 1440, height: 1000 },
      ...(credentials !== null ? { httpCredentials: credentials } : {}),
    });
    contexts.push(context);
    return context;
  }

  before(async () => {
    assert.ok(
      existsSync(CHROMIUM),
      `${CHROMIUM} is missing: run the tests through scripts/test.mjs (it installs Debian's chromium as root) or apt-get install -y chromium`,
    );
    profileDir = mkdtempSync(join(tmpdir(), 'csa2-chromium-'));
    mkdirSync(SCREENSHOTS, { recursive: true });
    h = await startHarness({ CSA2_OPERATOR_KEYS: OPERATOR_KEY, CSA2_BATCH_POLL_MS: '50', CSA2_BATCH_WINDOW_LINES: '2' });
    drivers = await startBatchDrivers(h.deps);
    fakeDecoder(h, async (job, redis) => {
      const prompt = Buffer.from(job.data.promptIds.filter((id) => id < 256)).toString('latin1');
      if (prompt.includes('slow line')) await Promise.race([released, new Promise((r) => setTimeout(r, 30_000))]);
      const text = ' a fine answer';
      await writeEntries(redis, job.data.requestId, [...tokenEntries(text), finalEntry(job.data, text.length, { finishReason: 'length' })]);
    });
    fakeEncoder(h, async (job) => {
      const data = job.data;
      if (data.kind !== 'document') throw new UnrecoverableError('unexpected prompt job');
      if (data.documentId === 'broken-scan') throw new UnrecoverableError(formatFailure('input-invalid', 'the document has no text after OCR'));
      await job.updateProgress({ tokensDone: 120, tokensTotal: 200 });
      await Promise.race([released, new Promise((r) => setTimeout(r, 30_000))]);
      return { documentId: data.documentId, tokens: 200, bytesWritten: 1, artifactBytes: 1, reusedTokens: 0 };
    });
    // documents: two ready (one per tenant), one encoding, one failed
    await writeManifest(h, TENANT_A, 'annual-report-2025', 48_213);
    await writeManifest(h, TENANT_A, 'product-manual', 12_004);
    await writeManifest(h, TENANT_B, 'other-tenant-contract', 7_777);
    assert.equal(
      (await h.app.request(...post('/v1/documents', { id: 'legal-archive', token_ids: Array.from({ length: 200 }, (_, i) => i % 250) }))).status,
      202,
    );
    assert.equal((await h.app.request(...post('/v1/documents', { id: 'broken-scan', text: 'x' }))).status, 202);
    // batches: one completes, one keeps running
    const upload = async (lines: string[]): Promise<string> => {
      const form = new FormData();
      form.append('purpose', 'batch');
      form.append('file', new Blob([lines.join('\n')]), 'in.jsonl');
      const res = await h.app.request('http://gateway.test/v1/files', { method: 'POST', headers: { authorization: `Bearer ${KEY_A}` }, body: form });
      return ((await res.json()) as { id: string }).id;
    };
    const line = (i: number, prompt: string): string =>
      JSON.stringify({ custom_id: `l${i}`, method: 'POST', url: '/v1/completions', body: { model: MODEL_NAME, prompt, max_tokens: 8 } });
    const done = await upload([line(0, 'quick one'), line(1, 'quick two')]);
    const slow = await upload(Array.from({ length: 12 }, (_, i) => line(i, i < 4 ? `quick ${i}` : `slow line ${i}`)));
    for (const file of [done, slow])
      assert.equal((await h.app.request(...post('/v1/batches', { input_file_id: file, endpoint: '/v1/completions', completion_window: '24h' }))).status, 200);
    // traffic for the tiles
    for (let i = 0; i < 5; i++)
      assert.equal((await h.app.request(...post('/v1/completions', { model: MODEL_NAME, prompt: `hello ${i}`, max_tokens: 8 }))).status, 200);
    await waitFor('the document encoding and a batch midway', async () => {
      const s = (await (await h.app.request(...get('/status.json', OPERATOR_KEY))).json()) as {
        tenants: { tenant: string; encoding: unknown[]; failed: unknown[]; batches: { status: string; request_counts: { completed: number } }[] }[];
      };
      const a = s.tenants.find((t) => t.tenant === TENANT_A);
      const midway = a?.batches.some((b) => b.status === 'in_progress' && b.request_counts.completed >= 4) ?? false;
      return a !== undefined && a.encoding.length === 1 && a.failed.length === 1 && a.batches.some((b) => b.status === 'completed') && midway
        ? true
        : undefined;
    });
    server = serve({ fetch: h.app.fetch, port: 0, hostname: '127.0.0.1' }) as Server;
    await new Promise<void>((r) => (server.listening ? r() : server.once('listening', () => r())));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(async () => {
    release();
    for (const c of contexts) await c.close().catch(() => undefined);
    if (server !== undefined) await new Promise((r) => server.close(r));
    await drivers?.close();
    await h?.close();
    if (profileDir !== undefined) rmSync(profileDir, { recursive: true, force: true });
  });

  test('the operator sees every tenant, the queues, the workers and the traffic; nothing is loaded from elsewhere', async () => {
    const context = await browse({ username: 'operator', password: OPERATOR_KEY });
    const page = await context.newPage();
    const foreign: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(base)) foreign.push(r.url());
    });
    const res = await page.goto(`${base}/`);
    assert.equal(res?.status(), 200);
    // innerText follows CSS (tile labels are upper-cased): compare without case
    const text = (await page.innerText('body')).toLowerCase();
    for (const s of [
      'Queues',
      'Workers',
      'prefill',
      'decode',
      'Time to first token',
      'Output tokens / s',
      `Tenant ${TENANT_A}`,
      `Tenant ${TENANT_B}`,
      'annual-report-2025',
      'legal-archive',
      'broken-scan',
      'the document has no text after OCR',
      'other-tenant-contract',
      '120 / 200 tokens',
      'in progress',
      'completed',
    ]) {
      assert.ok(text.includes(s.toLowerCase()), `the page shows "${s}"`);
    }
    assert.match(text, /requests\s*\n?\s*\d+/);
    const file = join(SCREENSHOTS, 'status-operator.png');
    await page.screenshot({ path: file, fullPage: true });
    assert.ok(existsSync(file));
    assert.deepEqual(foreign, []);
  });

  test('a tenant key sees its own documents and batches only: no other tenant, no queues, workers or traffic', async () => {
    const context = await browse({ username: 'me', password: KEY_B });
    const page = await context.newPage();
    assert.equal((await page.goto(`${base}/`))?.status(), 200);
    const text = (await page.innerText('body')).toLowerCase();
    assert.ok(text.includes(`tenant ${TENANT_B}`) && text.includes('other-tenant-contract'));
    for (const s of [TENANT_A, 'annual-report-2025', 'legal-archive', 'Queues', 'Workers', 'Time to first token'])
      assert.ok(!text.includes(s.toLowerCase()), `a tenant does not see "${s}"`);
    await page.screenshot({ path: join(SCREENSHOTS, 'status-tenant.png'), fullPage: true });
  });

  test('without a key the page asks for one (401, Basic)', async () => {
    const res = await fetch(`${base}/`);
    assert.equal(res.status, 401);
    assert.match(res.headers.get('www-authenticate') ?? '', /^Basic /);
    const context = await browse({ username: 'x', password: 'not-a-key-at-all' });
    const page = await context.newPage();
    assert.equal((await page.goto(`${base}/`))?.status(), 401);
  });

  test('/docs renders in the browser', async () => {
    const context = await browse(null);
    const page = await context.newPage();
    assert.equal((await page.goto(`${base}/docs`))?.status(), 200);
    assert.ok((await page.innerText('body')).includes('/v1/batches/{batch_id}/cancel'));
    await page.screenshot({ path: join(SCREENSHOTS, 'docs.png') });
  });
});
