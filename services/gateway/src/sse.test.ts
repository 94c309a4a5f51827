import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SSE_DONE, createSseWriter, sseData } from './sse.js';

test('events are framed as OpenAI does: data: <json> and a blank line; [DONE] ends the stream', async () => {
  assert.equal(sseData({ a: 'x\ny' }), 'data: {"a":"x\\ny"}\n\n');
  assert.equal(SSE_DONE, 'data: [DONE]\n\n');
  const sse = createSseWriter({ keepaliveMs: 60_000 });
  sse.send({ n: 1 });
  sse.send({ n: 2 });
  sse.done();
  sse.close();
  assert.equal(sse.response.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  assert.equal(sse.response.headers.get('cache-control'), 'no-cache');
  assert.equal(await sse.response.text(), 'data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n');
});

test('a quiet stream gets keep-alive comments', async () => {
  const sse = createSseWriter({ keepaliveMs: 100 });
  await new Promise((r) => setTimeout(r, 260));
  sse.close();
  const text = await sse.response.text();
  assert.match(text, /^(: keep-alive\n\n)+$/);
});

test('cancelling the body calls the cancel listeners once and drops later writes', async () => {
  const sse = createSseWriter({ keepaliveMs: 60_000 });
  let cancels = 0;
  sse.onCancel(() => cancels++);
  sse.send({ n: 1 });
  const reader = (sse.response.body as ReadableStream<Uint8Array>).getReader();
  await reader.read();
  await reader.cancel();
  assert.equal(cancels, 1);
  assert.equal(sse.closed, true);
  sse.send({ n: 2 });
  sse.close();
  assert.equal(cancels, 1);
});

test('closing does not call the cancel listeners', async () => {
  const sse = createSseWriter({ keepaliveMs: 60_000 });
  let cancels = 0;
  sse.onCancel(() => cancels++);
  sse.close();
  await sse.response.text();
  assert.equal(cancels, 0);
});
