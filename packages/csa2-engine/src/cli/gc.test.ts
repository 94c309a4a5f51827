/**
 * @module cli/gc.test
 * `csa2 gc` as a user runs it, on a filesystem store: a dry run reports and deletes nothing, a real
 * run deletes the unreferenced old chunk and prints objects and bytes reclaimed, a referenced chunk
 * and a young one stay; bad command lines give one line (and the usage) and a non-zero exit.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chunkObjectKey, encodeManifest, manifestObjectKey, MANIFEST_FORMAT_VERSION } from '@csa2/artifacts';
import { parseGcArgs } from './gc.js';

const BIN = fileURLToPath(new URL('../../bin/csa2.js', import.meta.url));
const csa2 = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8' });
const HOUR_MS = 3_600_000;

function putFile(root: string, key: string, bytes: Uint8Array, ageMs = 0): string {
  const path = join(root, ...key.split('/'));
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, bytes);
  if (ageMs > 0) {
    const t = new Date(Date.now() - ageMs);
    utimesSync(path, t, t);
  }
  return path;
}

test('csa2 gc --dry-run reports, csa2 gc deletes the unreferenced old chunk and prints what it reclaimed', () => {
  const root = mkdtempSync(join(tmpdir(), 'csa2-cli-gc-'));
  const [kept, orphan, young] = ['a', 'b', 'c'].map((c) => c.repeat(64)) as [string, string, string];
  const keptPath = putFile(root, chunkObjectKey('acme', kept), new Uint8Array(1000), 2 * HOUR_MS);
  const orphanPath = putFile(root, chunkObjectKey('acme', orphan), new Uint8Array(700), 2 * HOUR_MS);
  const youngPath = putFile(root, chunkObjectKey('acme', young), new Uint8Array(500));
  const manifest = encodeManifest({
    formatVersion: MANIFEST_FORMAT_VERSION,
    modelId: 'm',
    layoutId: '0123456789abcdef',
    tenant: 'acme',
    documentId: 'doc',
    tokenCount: 10,
    chunkTokens: 16,
    chunks: [{ key: kept, startToken: 0, endToken: 10, sizeBytes: 1000, sha256: 'f'.repeat(64) }],
    createdAt: '2025-01-01T00:00:00.000Z',
  });
  putFile(root, manifestObjectKey('acme', 'doc'), manifest, 2 * HOUR_MS);
  const store = pathToFileURL(root).href;

  const dry = csa2('gc', '--store', store, '--dry-run');
  assert.equal(dry.status, 0, dry.stderr);
  assert.match(dry.stdout, /^tenant acme: 3 chunks \(0\.0 MB\), 1 manifests, 0 ingests running; would delete 1 chunks/m);
  assert.match(dry.stdout, /kept 1 unreferenced chunks in their grace period/);
  assert.match(dry.stdout, /^objects reclaimable \(dry run, nothing deleted\): 1$/m);
  assert.match(dry.stdout, /^bytes reclaimable \(dry run, nothing deleted\): 700 /m);
  assert.ok(existsSync(orphanPath));

  const run = csa2('gc', '--store', store);
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /^objects reclaimed: 1$/m);
  assert.match(run.stdout, /^bytes reclaimed: 700 \(0\.0 MB\)$/m);
  assert.deepEqual([existsSync(keptPath), existsSync(orphanPath), existsSync(youngPath)], [true, false, true]);

  const json = csa2('gc', '--store', store, '--json', '--grace-ms', '0');
  assert.equal(json.status, 0, json.stderr);
  assert.match(json.stderr, /warning: --grace-ms 0 is below 60000/);
  const report = JSON.parse(json.stdout) as { objectsReclaimed: number; bytesReclaimed: number; tenants: { tenant: string }[] };
  assert.deepEqual([report.objectsReclaimed, report.bytesReclaimed, report.tenants[0]?.tenant], [1, 500, 'acme'], 'grace 0: the young chunk goes too');
});

test('csa2 gc refuses bad command lines with one line and a non-zero exit', () => {
  for (const [args, status, pattern] of [
    [[], 2, /--store URL is required/],
    [['--store', '/tmp/x', '--grace'], 2, /Unknown option '--grace'/],
    [['--store', '/tmp/x', '--grace-ms', '1h'], 1, /--grace-ms must be a non-negative integer number of milliseconds, got "1h"/],
    [['--store', 'ftp://x'], 1, /unknown scheme "ftp:"/],
  ] as const) {
    const r = csa2('gc', ...args);
    assert.equal(r.status, status, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, pattern);
    assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  }
  assert.deepEqual(parseGcArgs(['--store', 's3://b/p', '--tenant', 'a', '--tenant', 'b', '--prompt-ttl-ms', 'off']), {
    store: 's3://b/p',
    graceMs: 3_600_000,
    markerTtlMs: 900_000,
    promptTtlMs: null,
    tenants: ['a', 'b'],
    dryRun: false,
    json: false,
  });
});
