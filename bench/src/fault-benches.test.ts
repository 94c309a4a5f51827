/** The recovery, fairness and bodies suites' options: defaults, and bad values refused by name. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseBodiesOptions } from './bodies-bench.js';
import { parseFairnessOptions } from './fairness-bench.js';
import { SERVED_MODEL_DIR, parseRecoveryOptions } from './recovery-bench.js';
import { UsageError } from './suite.js';

const usage = (name: string) => (err: unknown) => err instanceof UsageError && err.message.includes(name);

test("recovery: the services' own lock settings and the issue's scenario by default; overrides and extra variables", () => {
  const o = parseRecoveryOptions({});
  assert.deepEqual([o.lockMs, o.stalledMs, o.reservedSlots, o.modelDir], [null, null, null, SERVED_MODEL_DIR]);
  assert.deepEqual([o.streams, o.streamTokens, o.documents, o.documentTokens, o.longPrompts, o.longPromptTokens], [20, 200, 4, 15_000, 3, 2500]);
  assert.deepEqual(o.scenarios, ['decoder', 'encoder']);
  assert.deepEqual(o.extraEnv, {});
  const p = parseRecoveryOptions({
    'recovery-lock-ms': '30000',
    'recovery-stalled-ms': '5000',
    'recovery-reserved-slots': '0',
    'recovery-scenarios': 'encoder',
    'recovery-env': 'CSA2_MAX_STEP_TOKENS=256,CSA2_THREADS=1',
  });
  assert.deepEqual([p.lockMs, p.stalledMs, p.reservedSlots], [30_000, 5000, 0]);
  assert.deepEqual(p.scenarios, ['encoder']);
  assert.deepEqual(p.extraEnv, { CSA2_MAX_STEP_TOKENS: '256', CSA2_THREADS: '1' });
  assert.throws(() => parseRecoveryOptions({ 'recovery-lock-ms': '500' }), usage('--recovery-lock-ms'));
  assert.throws(() => parseRecoveryOptions({ 'recovery-scenarios': 'gateway' }), usage('--recovery-scenarios'));
  assert.throws(() => parseRecoveryOptions({ 'recovery-env': 'PATH=/tmp' }), usage('--recovery-env'));
  assert.throws(() => parseRecoveryOptions({ 'recovery-long-prompts': '30' }), usage('--recovery-long-prompts'));
});

test('fairness and bodies: defaults and bad values', () => {
  const f = parseFairnessOptions({});
  assert.deepEqual([f.reservedSlots, f.floodDocuments, f.floodTokens, f.promptTokens, f.documentTokens, f.samples], [null, 12, 8000, 2500, 1000, 2]);
  assert.equal(parseFairnessOptions({ 'fairness-reserved-slots': '0' }).reservedSlots, 0);
  assert.throws(() => parseFairnessOptions({ 'fairness-reserved-slots': '-1' }), usage('--fairness-reserved-slots'));
  assert.throws(() => parseFairnessOptions({ 'fairness-samples': 'two' }), usage('--fairness-samples'));
  const b = parseBodiesOptions({});
  assert.deepEqual([b.count, b.smallSamples, b.modelDir], [32, 3, SERVED_MODEL_DIR]);
  assert.throws(() => parseBodiesOptions({ 'bodies-count': '0' }), usage('--bodies-count'));
});
