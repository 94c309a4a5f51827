/** summarizeOrtProfiles over onnxruntime's profile format, and a real profile of a small session. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GraphBuilder } from '../onnx/graph-builder.js';
import { DEFAULT_RUNTIME_OPTIONS, f32, openGraphSession } from './ort-session.js';
import { ortProfileFiles, summarizeOrtProfiles } from './ort-profile.js';

test('summarizeOrtProfiles sums node times per operator and provider, and the runs', () => {
  const dir = mkdtempSync(join(tmpdir(), 'csa2-prof-'));
  try {
    const node = (op: string, dur: number) => ({
      cat: 'Node',
      name: `n_${op}_kernel_time`,
      dur,
      args: {
        op_name: op,
        provider: 'CPUExecutionProvider',
        activation_size: '100',
        parameter_size: '20',
        output_size: '8',
        input_type_shape: [{ float: [2, 3, 5] }, { float: [5, 7] }],
        output_type_shape: [{ float: [2, 3, 7] }],
      },
    });
    writeFileSync(
      join(dir, 'p-attn_2026-12-08_01-02-03.json'),
      JSON.stringify([
        { cat: 'Session', name: 'model_loading_array', dur: 900 },
        { cat: 'Session', name: 'model_run', dur: 5000 },
        node('MatMul', 3000),
        node('Add', 500),
        node('MatMul', 1000),
        { cat: 'Node', name: 'n_MatMul_fence_before', dur: 7 },
      ]),
    );
    writeFileSync(join(dir, 'p-encoder_2026-12-08_01-02-04_167.json'), JSON.stringify([{ cat: 'Session', name: 'model_run', dur: 1000 }, node('Add', 250)]));
    writeFileSync(join(dir, 'other.json'), '[]');
    const files = ortProfileFiles(join(dir, 'p-'));
    assert.equal(files.length, 2);
    const s = summarizeOrtProfiles(files, join(dir, 'p-'));
    assert.deepEqual([s.files, s.runs, s.runMs, s.nodeMs], [2, 2, 6, 4.75]);
    assert.deepEqual(s.sessions, [
      { name: 'attn', runs: 1, runMs: 5, executions: 3, bytes: 384 },
      { name: 'encoder', runs: 1, runMs: 1, executions: 1, bytes: 128 },
    ]);
    assert.deepEqual(
      s.ops.map((o) => [o.op, o.executions, o.ms, o.bytes, o.flops]),
      [
        ['MatMul', 2, 4, 256, 2 * (2 * 2 * 3 * 5 * 7)],
        ['Add', 2, 0.75, 256, 0],
      ],
    );
    writeFileSync(join(dir, 'p-bad.json'), '{"not": "events"}');
    assert.throws(() => summarizeOrtProfiles(ortProfileFiles(join(dir, 'p-'))), /not an array of events/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a session opened with profilePrefix writes its profile when disposed: its runs and nodes', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'csa2-prof-'));
  try {
    const g = new GraphBuilder('prof');
    const x = g.input('x', 'float32', [2, 2]);
    g.output(g.mul(g.matmul(x, x), x), 'y', 'float32', [2, 2]);
    const session = await openGraphSession('prof', g.toBytes(), { ...DEFAULT_RUNTIME_OPTIONS, profilePrefix: join(dir, 'p-') }, 1);
    for (let i = 0; i < 3; i++) await session.run({ x: f32(new Float32Array([1, 2, 3, 4]), [2, 2]) });
    await session.dispose();
    const s = summarizeOrtProfiles(ortProfileFiles(join(dir, 'p-')));
    assert.equal(s.runs, 3);
    assert.deepEqual(s.ops.map((o) => `${o.op} ${o.executions}`).sort(), ['MatMul 3', 'Mul 3']);
    assert.ok(s.ops.every((o) => o.provider === 'CPUExecutionProvider'));
    const mm = s.ops.find((o) => o.op === 'MatMul');
    assert.equal(mm?.flops, 3 * 2 * 2 * 2 * 2, '2×2 by 2×2, three runs');
    assert.equal(mm?.bytes, 3 * (2 * 16 + 16), 'two 16-byte inputs and a 16-byte output, three runs');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
