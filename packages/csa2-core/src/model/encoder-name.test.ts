/**
 * The encoder's name in artifact layouts: the CPU's reference encoder has the empty name on either path
 * and in any chunks (its bits do not depend on them); another provider's name carries its path and its
 * grid's rows, each of which changes the bits it writes.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { fixturesRoot } from '../testing/fixtures.js';
import { loadModel } from './load-model.js';
import { encoderLayoutName } from './model.js';

test('encoderLayoutName: empty on the CPU; provider, path and grid rows elsewhere; a grid is required off the CPU', () => {
  assert.equal(encoderLayoutName('cpu', 'layers', null), '');
  assert.equal(encoderLayoutName('cpu', 'graph', 4096), '');
  assert.equal(encoderLayoutName('cuda', 'graph', 4096), 'cuda-g4096');
  assert.equal(encoderLayoutName('cuda', 'layers', 256), 'cuda-l256');
  assert.notEqual(encoderLayoutName('cuda', 'graph', 4096), encoderLayoutName('cuda', 'graph', 8192));
  assert.notEqual(encoderLayoutName('cuda', 'graph', 4096), encoderLayoutName('cuda', 'layers', 4096));
  // the layout's rule for names: 1..16 of [a-z0-9-], at the largest row count encoderRows allows
  assert.match(encoderLayoutName('cuda', 'layers', 1 << 20), /^[a-z0-9][a-z0-9-]{0,15}$/);
  assert.throws(() => encoderLayoutName('cuda', 'graph', null), /needs its grid's rows/);
});

test('a CPU model: the empty name and no grid through the layers; the graph encoder cuts at its rows and keeps the empty name', async () => {
  const dir = join(fixturesRoot(), 'deepseek-v41-tiny-a');
  const layers = await loadModel(dir, { chunkTokens: 64 });
  try {
    assert.equal(layers.encoderName, '');
    assert.equal(layers.encodeGrid, null);
  } finally {
    await layers.dispose();
  }
  const graph = await loadModel(dir, { chunkTokens: 64, encoder: 'graph' });
  try {
    assert.equal(graph.encoderName, '');
    assert.equal(graph.encodeGrid, 64);
  } finally {
    await graph.dispose();
  }
});
