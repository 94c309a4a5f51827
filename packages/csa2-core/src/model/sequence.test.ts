import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RowStore } from './sequence.js';

test('RowStore.withTrailing lays extra rows after the stored ones without making them part of the store', () => {
  const s = new RowStore(2, 1);
  s.append(Float32Array.of(1, 2, 3, 4)); // grows past its initial capacity
  const v = s.withTrailing(Float32Array.of(9, 9, 8, 8, 7, 7)); // grows again for the extra rows
  assert.deepEqual(Array.from(v), [1, 2, 3, 4, 9, 9, 8, 8, 7, 7]);
  assert.equal(s.rows, 2);
  assert.deepEqual(Array.from(s.view()), [1, 2, 3, 4]);
  // the next append overwrites the trailing rows
  s.append(Float32Array.of(5, 6));
  assert.deepEqual(Array.from(s.view()), [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(Array.from(s.withTrailing(Float32Array.of(0, 0))), [1, 2, 3, 4, 5, 6, 0, 0]);
  assert.throws(() => s.withTrailing(Float32Array.of(1, 2, 3)), /not a multiple of 2/);
});
