#!/usr/bin/env node
// Faults 1, 4, 5 (tools/faults/README.md): cached_tokens of a cold 2,048-token prompt and of a 12,000-token prompt sent
// twice; a document's created_at while queued and once ready; a completion on a document whose chunk was
// deleted from the store, and that document's status. Usage: node tools/faults/accounting.mjs
import { mkdtempSync, readFileSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { API_KEY, Pipeline, postJson, seededTestModel, sleep } from './lib.mjs';

const modelRoot = mkdtempSync(join(tmpdir(), 'csa2-faults-model-'));
const modelDir = await seededTestModel(modelRoot, 20_000);
const pipe = await Pipeline.start({ modelDir });
const get = async (path) => (await fetch(`${pipe.url}${path}`, { headers: { authorization: `Bearer ${API_KEY}` } })).json();
try {
  const cached = async (prompt) => {
    const r = await postJson(pipe, '/v1/completions', { model: 'tiny', prompt, max_tokens: 2 });
    const body = await r.json();
    return `${r.status} prompt_tokens ${body.usage?.prompt_tokens} cached_tokens ${body.usage?.prompt_tokens_details?.cached_tokens}`;
  };
  console.log(`cold 2,048-token prompt: ${await cached('c'.repeat(2048))}`);
  const long = 'L'.repeat(12_000);
  console.log(`12,000-token prompt, first: ${await cached(long)}`);
  console.log(`12,000-token prompt, again: ${await cached(long)}`);

  const created = await (await postJson(pipe, '/v1/documents', { id: 'dated', text: 'd'.repeat(8000) })).json();
  let doc = created;
  while (doc.status !== 'ready' && doc.status !== 'failed') {
    await sleep(100);
    doc = await get('/v1/documents/dated');
  }
  console.log(`document created_at: ${created.created_at} when queued, ${doc.created_at} when ${doc.status}`);

  const storeDir = fileURLToPath(pipe.storeUrl);
  const manifest = JSON.parse(readFileSync(join(storeDir, 'tenants/acme/documents/dated/manifest.json'), 'utf8'));
  const key = manifest.chunks[1].key;
  unlinkSync(join(storeDir, 'tenants/acme/chunks', key.slice(0, 2), key));
  const r = await postJson(pipe, '/v1/completions', { model: 'tiny', prompt: ' and?', max_tokens: 2, document_id: 'dated' });
  const body = await r.json();
  console.log(`completion on it after a chunk was deleted: ${r.status} ${body.error?.code}`);
  const status = await get('/v1/documents/dated');
  console.log(`its status then: ${status.status}${status.error_code ? ` (${status.error_code})` : ''}`);
} finally {
  await pipe.stop();
  rmSync(modelRoot, { recursive: true, force: true });
}
