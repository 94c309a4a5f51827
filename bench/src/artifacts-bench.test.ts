/**
 * The artifacts suite: its goals against hand-made runs (met, missed, not measured), and a small
 * smoke run on the filesystem store in two rounds (each round on fresh storage, the float path in
 * round 1 only) that checks the figures and the printed tables.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { artifactGoals, DEFAULT_ARTIFACTS_BENCH_OPTIONS, parseArtifactsBenchOptions, runArtifactsBench, type StoreRun } from './artifacts-bench.js';
import type { BenchIo } from './suite.js';

const MB = 1e6;

function run(store: string, path: 'packed' | 'float', writeMBps: number, readMBps: number, round = 1): StoreRun {
  const bytes = 1000 * MB;
  return {
    store,
    round,
    path,
    objects: 257,
    bytes,
    writeMs: (bytes / MB / writeMBps) * 1000,
    encodeMs: 1,
    putMs: 1,
    readMs: (bytes / MB / readMBps) * 1000,
    getMs: 1,
    verifyMs: 1,
    manifestBytes: 1,
    writeCpuMs: 1,
    readCpuMs: 1,
  };
}

describe('artifacts goals', () => {
  it('met in every round, missed in one, not measured without the filesystem packed path', () => {
    const met = artifactGoals([
      run('filesystem', 'packed', 600, 1500, 1),
      run('filesystem', 'packed', 550, 1200, 2),
      run('filesystem', 'float', 10, 100, 1),
      run('s3 (s3rver, local)', 'packed', 100, 200),
    ]);
    assert.deepEqual(
      met.map((g) => g.met),
      [true, true],
    );
    assert.match(met[0]?.figure ?? '', /^575 \(550–600\) MB\/s; 2 of 2 rounds$/);
    const missed = artifactGoals([run('filesystem', 'packed', 600, 1500, 1), run('filesystem', 'packed', 450, 900, 2)]);
    assert.deepEqual(
      missed.map((g) => [g.met, g.figure.endsWith('1 of 2 rounds')]),
      [
        [false, true],
        [false, true],
      ],
    );
    assert.deepEqual(
      artifactGoals([run('s3 (s3rver, local)', 'packed', 100, 200)]).map((g) => g.met),
      [null, null],
    );
  });

  it('options: rounds, --quick', () => {
    assert.equal(parseArtifactsBenchOptions({}).repeats, DEFAULT_ARTIFACTS_BENCH_OPTIONS.repeats);
    assert.equal(parseArtifactsBenchOptions({ 'artifact-repeats': '5' }).repeats, 5);
    assert.equal(parseArtifactsBenchOptions({ quick: true }).repeats, 1);
    assert.throws(() => parseArtifactsBenchOptions({ 'artifact-repeats': '0' }), /positive integer/);
  });
});

describe('artifacts bench (filesystem smoke run)', () => {
  it('writes and reads 16,384 tokens of the released layout in two rounds and prints the goals', { timeout: 120_000 }, async () => {
    const lines: string[] = [];
    const io: BenchIo = { out: (t) => lines.push(t), log: (l) => lines.push(l) };
    const text = await runArtifactsBench({ ...DEFAULT_ARTIFACTS_BENCH_OPTIONS, tokens: 16384, stores: ['fs'], floatStores: ['fs'], repeats: 2 }, io);
    // rounds: packed twice (each on fresh storage), float once
    assert.match(text, /\| filesystem \| packed +\| +2 \| +5 \|/);
    assert.match(text, /\| filesystem \| float +\| +1 \| +5 \|/);
    assert.match(text, /filesystem write ≥ 500 MB\/s +\| (yes|no) /);
    assert.match(text, /filesystem read \+ verify ≥ 1000 MB\/s +\| (yes|no) .*of 2 rounds/);
    assert.ok(lines.some((l) => l.includes('round 2/2')));
  });
});
