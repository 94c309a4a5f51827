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
