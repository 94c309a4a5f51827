/**
 * GraphBuilder's bookkeeping that the model graphs rely on: weights scoped per layer keep distinct
 * names, and hostArgsComputed finds values computed in the graph for arguments a kernel reads in host
 * memory (what an accelerator's provider would leave to the CPU).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GraphBuilder } from './graph-builder.js';

test('withScope prefixes the weights created inside it, nested and restored after', () => {
  const g = new GraphBuilder('scopes');
  const w = new Float32Array([1, 2]);
  const a = g.withScope('l0.', () => g.weight('wq', w, [2]));
  const b = g.withScope('l1.', () => g.withScope('expert.', () => g.weight('wq', w, [2])));
  const c = g.weight('wq', w, [2]);
  assert.deepEqual([a, b, c], ['l0.wq', 'l1.expert.wq', 'wq']);
});

test('hostArgsComputed: a Slice bound or a TopK k computed from a graph input is reported; from inputs and constants it is not', () => {
  const g = new GraphBuilder('host');
  const x = g.input('x', 'float32', [8, 4]);
  const end = g.input('end', 'int64', [1]);
  const k = g.input('k', 'int64', [1]);
  g.output(g.op('Slice', [x, g.const('int64', [0]), end, g.const('int64', [0])]), 'direct', 'float32', ['r', 4]);
  g.output(g.op('Slice', [x, g.const('int64', [0]), g.add(g.const('int64', [2]), g.const('int64', [1])), g.const('int64', [0])]), 'folded', 'float32', [3, 4]);
  assert.deepEqual(g.hostArgsComputed(), []);
  g.output(g.op('Slice', [x, g.const('int64', [0]), g.add(end, g.const('int64', [1])), g.const('int64', [0])]), 'computed', 'float32', ['r', 4]);
  g.node('TopK', [x, g.op('Min', [k, g.const('int64', [3])])], { axis: -1 }, 2);
  const bad = g.hostArgsComputed();
  assert.equal(bad.length, 2, bad.join('; '));
  assert.match(bad[0] as string, /^Slice input 2 .*from Add/);
  assert.match(bad[1] as string, /^TopK input 1 .*from Min/);
});

test('cast: one Cast per value and type; a bfloat16 value widened and cast back is itself; a rounding to bf16 stays', () => {
  const g = new GraphBuilder('casts');
  const x = g.input('x', 'float32', [4]);
  const h = g.initializer('h', 'bfloat16', [2], new Uint8Array(4));
  const xb = g.cast(x, 'bfloat16');
  assert.equal(g.cast(x, 'bfloat16'), xb, 'the same cast twice is one node');
  const rounded = g.cast(xb, 'float32');
  assert.notEqual(rounded, x, 'float32 → bf16 → float32 rounds: it is kept');
  assert.equal(g.cast(rounded, 'bfloat16'), xb, 'a widened bf16 value cast back to bf16 is the bf16 value');
  const wide = g.cast(h, 'float32');
  assert.equal(g.cast(wide, 'bfloat16'), h);
  const i = g.input('i', 'int64', [4]);
  const f = g.cast(i, 'float32');
  assert.notEqual(g.cast(f, 'int64'), i, 'only the exact bf16 round trip is shortened');
});
