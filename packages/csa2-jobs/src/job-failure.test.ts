/** The processors' common failure policy: classification, the log line, the error entry, what is thrown. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DelayedError, UnrecoverableError, type Job } from 'bullmq';
import { failJob, followJobSignal, handJobBack, parseJobPayload, readableRequestId } from './job-failure.js';
import type { LogLevel } from './log-line.js';
import { JobPayloadError, parseDecodeJob } from './payloads.js';

function fakeJob(data: unknown, attemptsMade: number, attempts: number) {
  const moved: unknown[][] = [];
  const job = { id: 'j1', data, attemptsMade, opts: { attempts }, moveToDelayed: async (...args: unknown[]) => void moved.push(args) };
  return { job: job as unknown as Job<unknown, unknown>, moved };
}

function recorder() {
  const lines: { level: LogLevel; msg: string; fields: Readonly<Record<string, unknown>> | undefined }[] = [];
  const errors: string[][] = [];
  return {
    lines,
    errors,
    log: (level: LogLevel, msg: string, fields?: Readonly<Record<string, unknown>>) => void lines.push({ level, msg, fields }),
    writeError: async (requestId: string, code: string, message: string) => void errors.push([requestId, code, message]),
  };
}

const coded = (code: string, message: string) => Object.assign(new Error(message), { code });

test('readableRequestId: a well-formed request id, of the given kind when one is named', () => {
  assert.equal(readableRequestId({ requestId: 'r-1' }), 'r-1');
  assert.equal(readableRequestId({ requestId: 'not ok' }), null);
  assert.equal(readableRequestId('r-1'), null);
  assert.equal(readableRequestId(null), null);
  assert.equal(readableRequestId({ kind: 'prompt', requestId: 'r-1' }, 'prompt'), 'r-1');
  assert.equal(readableRequestId({ kind: 'document', requestId: 'r-1' }, 'prompt'), null);
});

test('parseJobPayload: a malformed payload is logged, gets its error entry and fails for good', async () => {
  const r = recorder();
  const { job } = fakeJob({ requestId: 'r-2' }, 0, 5);
  await assert.rejects(
    parseJobPayload(job, parseDecodeJob, { what: 'decode', log: r.log, requestIdOf: readableRequestId, writeError: r.writeError }),
    (err: unknown) => err instanceof UnrecoverableError && err.message.startsWith('[payload-invalid] malformed decode job: '),
  );
  assert.deepEqual(
    r.lines.map((l) => [l.level, l.msg, l.fields?.['requestId']]),
    [['warn', 'malformed decode job', 'r-2']],
  );
  assert.deepEqual(
    r.errors.map((e) => e.slice(0, 2)),
    [['r-2', 'payload-invalid']],
  );

  const other = new Error('not a payload problem');
  await assert.rejects(
    parseJobPayload(
      job,
      () => {
        throw other;
      },
      { what: 'decode', log: r.log, requestIdOf: readableRequestId, writeError: r.writeError },
    ),
    (e) => e === other,
  );
  assert.equal(await parseJobPayload(job, (d) => d, { what: 'decode', log: r.log, requestIdOf: readableRequestId, writeError: r.writeError }), job.data);
});

test('failJob: a transient error before the last attempt is retried, with no error entry', async () => {
  const r = recorder();
  const { job } = fakeJob({}, 1, 5);
  const cause = coded('store-unavailable', 'S3 said 503');
  const thrown = await failJob(cause, job, {
    log: r.log,
    msg: 'x failed',
    fields: { requestId: 'r-3', jobId: 'j1' },
    requestId: 'r-3',
    writeError: r.writeError,
  });
  assert.ok(!(thrown instanceof UnrecoverableError));
  assert.equal(thrown.message, '[store-unavailable] S3 said 503');
  assert.equal(thrown.cause, cause);
  assert.deepEqual(r.errors, []);
  assert.equal(r.lines[0]?.level, 'warn');
  assert.deepEqual(Object.keys(r.lines[0]?.fields ?? {}), ['requestId', 'jobId', 'code', 'deterministic', 'attempt', 'err', 'errName']);
  assert.equal(r.lines[0]?.fields?.['attempt'], 2);
});

test('failJob: on the last attempt the error entry is written first; a code-less error is "runtime"', async () => {
  const r = recorder();
  const { job } = fakeJob({}, 4, 5);
  const thrown = await failJob(new Error('boom'), job, { log: r.log, msg: 'x failed', fields: {}, requestId: 'r-4', writeError: r.writeError });
  assert.ok(!(thrown instanceof UnrecoverableError));
  assert.equal(thrown.message, '[runtime] boom');
  assert.deepEqual(r.errors, [['r-4', 'runtime', 'boom']]);
  assert.equal(r.lines[0]?.level, 'error');
});

test('failJob: deterministic codes and JobPayloadError fail for good; no request id, no error entry', async () => {
  const r = recorder();
  const { job } = fakeJob({}, 0, 5);
  const a = await failJob(coded('not-found', 'no such document'), job, { log: r.log, msg: 'x failed', fields: {}, requestId: 'r-5', writeError: r.writeError });
  assert.ok(a instanceof UnrecoverableError);
  assert.equal(a.message, '[not-found] no such document');
  const b = await failJob(new JobPayloadError('prefill', ['decode: differs']), job, {
    log: r.log,
    msg: 'x failed',
    fields: {},
    requestId: null,
    writeError: r.writeError,
  });
  assert.ok(b instanceof UnrecoverableError);
  assert.equal(b.message, '[payload-invalid] malformed prefill job: decode: differs');
  assert.deepEqual(
    r.errors.map((e) => e.slice(0, 2)),
    [['r-5', 'not-found']],
  );
});

test('followJobSignal calls back once (at once when aborted already); handJobBack moves the job back', async () => {
  let calls = 0;
  const c = new AbortController();
  const stop = followJobSignal(c.signal, () => calls++);
  c.abort();
  c.abort();
  stop();
  assert.equal(calls, 1);
  followJobSignal(c.signal, () => calls++)();
  assert.equal(calls, 2);
  const later = new AbortController();
  followJobSignal(later.signal, () => calls++)();
  later.abort();
  assert.equal(calls, 2, 'no call after it was stopped');
  followJobSignal(undefined, () => calls++)();

  const r = recorder();
  const { job, moved } = fakeJob({}, 0, 5);
  assert.ok((await handJobBack(job, 'tok', r.log, { jobId: 'j1' })) instanceof DelayedError);
  assert.equal(moved.length, 1);
  assert.equal(moved[0]?.[1], 'tok');
  assert.deepEqual(
    r.lines.map((l) => [l.level, l.msg]),
    [['info', 'handing the job back (shutting down)']],
  );
});
