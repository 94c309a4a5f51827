/** modelFingerprint: stable for one checkpoint, different for another seed or config, clear errors. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, readFileSync, cpSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { modelFingerprint } from './fingerprint.js';
import { initModel } from './init-model.js';

const CONFIG = JSON.parse(readFileSync(new URL('../../configs/v41-tiny.json', import.meta.url), 'utf8')) as Record<string, unknown>;

test('the fingerprint is stable per checkpoint and changes with the weights or the config', async () => {
  const root = mkdtempSync(join(tmpdir(), 'csa2-fp-'));
  await initModel(CONFIG, { seed: 1, outDir: join(root, 'a') });
  await initModel(CONFIG, { seed: 2, outDir: join(root, 'b') });
  cpSync(join(root, 'a'), join(root, 'a2'), { recursive: true });
  const a = await modelFingerprint(join(root, 'a'));
  assert.match(a, /^[0-9a-f]{32}$/);
  assert.equal(await modelFingerprint(join(root, 'a2')), a, 'a copy has the same fingerprint');
  assert.notEqual(await modelFingerprint(join(root, 'b')), a, 'another seed differs');
  const cfg = JSON.parse(readFileSync(join(root, 'a2', 'config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(root, 'a2', 'config.json'), JSON.stringify({ ...cfg, route_scale: 2 }));
  assert.notEqual(await modelFingerprint(join(root, 'a2')), a, 'a config change differs');
  await assert.rejects(modelFingerprint(join(root, 'missing')), /config\.json/);
});
