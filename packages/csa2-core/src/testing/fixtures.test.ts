/**
 * The fixtures live in the repository: fixturesRoot() is `<repo>/fixtures` unless CSA2_FIXTURES_DIR says
 * otherwise, and goldenFixtures() lists exactly the fixtures with both a checkpoint and golden outputs.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fixturesRoot, goldenFixtures } from './fixtures.js';

const REPO = resolve(fileURLToPath(new URL('../../../../', import.meta.url)));
const overridden = (process.env['CSA2_FIXTURES_DIR'] ?? '') !== '';

test("fixturesRoot() is the repository's fixtures/ folder", { skip: overridden && 'CSA2_FIXTURES_DIR is set' }, () => {
  assert.equal(fixturesRoot(), join(REPO, 'fixtures'));
  for (const f of [
    'deepseek-v41-tiny-a/config.json',
    'deepseek-v41-tiny-a/model.safetensors',
    'deepseek-v41-tiny-a/golden.safetensors',
    'deepseek-v41-flash/config.json',
  ]) {
    assert.ok(existsSync(join(fixturesRoot(), f)), `fixtures/${f} is missing`);
  }
});

test("goldenFixtures() lists the parity fixtures only: tiny-a, not the served model's golden-only fixture", {
  skip: overridden && 'CSA2_FIXTURES_DIR is set',
}, () => {
  assert.deepEqual(
    goldenFixtures().map((d) => basename(d)),
    ['deepseek-v41-tiny-a'],
  );
  // golden outputs without a checkpoint beside them: read by trained-parity.test.ts against models/
  assert.ok(existsSync(join(fixturesRoot(), 'v41-mini-128k-official', 'golden.safetensors')));
});

test('CSA2_FIXTURES_DIR overrides the folder', () => {
  const saved = process.env['CSA2_FIXTURES_DIR'];
  try {
    process.env['CSA2_FIXTURES_DIR'] = '/nonexistent/fixtures-elsewhere';
    assert.equal(fixturesRoot(), '/nonexistent/fixtures-elsewhere');
    assert.throws(() => goldenFixtures(), /CSA2_FIXTURES_DIR/);
  } finally {
    if (saved === undefined) delete process.env['CSA2_FIXTURES_DIR'];
    else process.env['CSA2_FIXTURES_DIR'] = saved;
  }
});
