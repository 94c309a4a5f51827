/**
 * SegmentRun's chunking: by the rows a step offers, or on a grid (the one-graph encoder's chunks), where
 * the chunks are the same whatever the steps offer.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Sequence } from '@csa2/core';
import { SegmentRun, type SegmentRunOptions } from './segment-run.js';

function chunks(opts: Partial<SegmentRunOptions>, offers: readonly number[]): Array<[number, number]> {
  const seq = new Sequence({ numLayers: 1, window: 4, headDim: 8, indexHeadDim: 8, kvSources: [] });
  seq.tokens.append(new Uint32Array(20));
  const run = new SegmentRun(seq, { start: 0, end: 20, l0: 0, l1: 1, input: null, ...opts }, { hcMult: 1, dim: 1 });
  const out: Array<[number, number]> = [];
  for (let i = 0; !run.done; i++) {
    const span = run.span(offers[i % offers.length] as number);
    out.push([span.p0, span.p1]);
    run.took(span, { stream: { start: span.p0, rows: 0, X: new Float32Array(0), pre: new Float32Array(0) }, logits: null });
  }
  return out;
}

test('without a grid a chunk is what the step offers; on a grid one chunk a cell, whatever is offered', () => {
  assert.deepEqual(chunks({}, [7]), [
    [0, 7],
    [7, 14],
    [14, 20],
  ]);
  for (const offers of [[3], [8], [100], [1, 13]]) {
    assert.deepEqual(chunks({ grid: 8 }, offers), [
      [0, 8],
      [8, 16],
      [16, 20],
    ]);
  }
});

test('on a grid: a run resumed inside a cell finishes that cell first, and a break row splits its cell', () => {
  assert.deepEqual(chunks({ grid: 8, from: 5 }, [3]), [
    [5, 8],
    [8, 16],
    [16, 20],
  ]);
  assert.deepEqual(chunks({ grid: 8, breakAt: 10 }, [100]), [
    [0, 8],
    [8, 10],
    [10, 16],
    [16, 20],
  ]);
});
