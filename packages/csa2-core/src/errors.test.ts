import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, Csa2Error, ShapeError } from './errors.js';

test('errors carry their code, name and the offending field', () => {
  const e = new ConfigError('dim', 'must be a positive integer, got -1');
  assert.ok(e instanceof Csa2Error);
  assert.equal(e.code, 'config-invalid');
  assert.equal(e.name, 'ConfigError');
  assert.equal(e.field, 'dim');
  assert.match(e.message, /dim: must be a positive integer, got -1/);
  assert.match(new ShapeError('q', ['seqLen', 64], [3, 32]).message, /expected dims \[seqLen, 64\], got \[3, 32\]/);
});
