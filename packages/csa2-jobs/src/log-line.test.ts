/** The services' one log format and the log context (withLogFields). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServiceLogger, currentLogFields, jsonLogger, pinoLogFunction, withLogFields } from './log-line.js';

function capture() {
  const lines: Record<string, unknown>[] = [];
  return { lines, out: { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) } };
}

test('one JSON object per line: level name, ISO time, service, fields, msg', () => {
  const { lines, out } = capture();
  const log = jsonLogger('decoder-worker', 'info', out);
  log('debug', 'below the level');
  log('warn', 'careful', { requestId: 'r-1', n: 3 });
  assert.equal(lines.length, 1);
  const [l] = lines;
  assert.deepEqual(Object.keys(l ?? {}).sort(), ['level', 'msg', 'n', 'requestId', 'service', 'time']);
  assert.equal(l?.['level'], 'warn');
  assert.equal(l?.['service'], 'decoder-worker');
  assert.equal(l?.['msg'], 'careful');
  assert.ok(!Number.isNaN(Date.parse(String(l?.['time']))));
});

test('withLogFields: every line inside carries the fields, awaited and timer continuations too; call-site fields win; nesting merges', async () => {
  const { lines, out } = capture();
  const pino = createServiceLogger('gateway', 'info', out);
  const log = pinoLogFunction(pino);
  await withLogFields({ reqId: 'req-1' }, async () => {
    pino.info('direct');
    await new Promise((r) => setTimeout(r, 1));
    log('info', 'after an await');
    await new Promise<void>((resolve) => setTimeout(() => (log('info', 'in a timer'), resolve()), 1));
    log('info', 'overridden', { reqId: 'mine' });
    withLogFields({ jobId: 'j' }, () => log('info', 'nested'));
    assert.deepEqual(currentLogFields(), { reqId: 'req-1' });
  });
  log('info', 'outside');
  assert.deepEqual(
    lines.map((l) => [l['msg'], l['reqId'], l['jobId']]),
    [
      ['direct', 'req-1', undefined],
      ['after an await', 'req-1', undefined],
      ['in a timer', 'req-1', undefined],
      ['overridden', 'mine', undefined],
      ['nested', 'req-1', 'j'],
      ['outside', undefined, undefined],
    ],
  );
  assert.ok(lines.every((l) => l['service'] === 'gateway'));
  // one key per field, even when the context and the call site both name it
  const raw: string[] = [];
  pinoLogFunction(createServiceLogger('x', 'info', { write: (s: string) => void raw.push(s) }))('info', 'dup', { reqId: 'b' });
  withLogFields({ reqId: 'a' }, () =>
    pinoLogFunction(createServiceLogger('x', 'info', { write: (s: string) => void raw.push(s) }))('info', 'dup', { reqId: 'b' }),
  );
  for (const r of raw) assert.equal(r.split('"reqId"').length, 2, r);
});

test("level 'silent' logs nothing", () => {
  const { lines, out } = capture();
  createServiceLogger('gateway', 'silent', out).error('nothing');
  assert.equal(lines.length, 0);
});
