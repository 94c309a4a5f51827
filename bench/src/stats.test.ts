import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fmtSpread, median, percentile } from './stats.js';

test('median: middle value, mean of the two middle ones for an even count, input order irrelevant', () => {
  assert.equal(median([5, 1, 3]), 3);
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.equal(median([7]), 7);
});

test('percentile: nearest rank', () => {
  const xs = Array.from({ length: 100 }, (_, i) => 100 - i); // 1..100 reversed
  assert.equal(percentile(xs, 50), 50);
  assert.equal(percentile(xs, 99), 99);
  assert.equal(percentile(xs, 100), 100);
  assert.equal(percentile([3, 1, 2], 50), 2);
  assert.equal(percentile([3, 1, 2], 1), 1);
});

test('fmtSpread: the median and the range; one value alone; none', () => {
  assert.equal(fmtSpread([3, 1, 2], String), '2 (1–3)');
  assert.equal(fmtSpread([5], String), '5');
  assert.equal(fmtSpread([], String), '-');
});
