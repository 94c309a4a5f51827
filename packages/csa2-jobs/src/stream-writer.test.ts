/** The exactly-once stream append on a real redis-server: duplicates, gaps, the end, the TTL. */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { connectRedis, startLocalRedis, type LocalRedis } from './redis.js';
import { choiceStreamId, streamKey } from './queues.js';
import { decodeStreamEntry, encodeStreamEntry, type StreamEntry } from './stream.js';
import { StreamStateError, appendStreamEntry, readStreamState } from './stream-writer.js';
import { readStreamEntries } from './testing/queue-support.js';

let server: LocalRedis;
let redis: Redis;
before(async () => {
  server = await startLocalRedis();
  redis = connectRedis(server.url);
});
after(async () => {
  await redis?.quit();
  await server?.stop();
});

const usage = (n: number) => ({ prompt_tokens: 2, completion_tokens: n, total_tokens: 2 + n, prompt_tokens_details: { cached_tokens: 0 } });

test('token entries go in once each, in order; a gap is refused; the final entry ends the stream', async () => {
  const r = 'w1';
  assert.equal(await appendStreamEntry(redis, r, { kind: 'token', index: 0, id: 5, text: 'a' }), 'written');
  assert.equal(await appendStreamEntry(redis, r, { kind: 'token', index: 0, id: 5, text: 'a' }), 'exists');
  await assert.rejects(appendStreamEntry(redis, r, { kind: 'token', index: 2, id: 6, text: 'c' }), StreamStateError);
  assert.equal(await appendStreamEntry(redis, r, { kind: 'token', index: 1, id: 6, text: 'b' }), 'written');
  await assert.rejects(appendStreamEntry(redis, r, { kind: 'final', finishReason: 'length', usage: usage(3), tokens: 3 }), /gap/);
  assert.equal(await appendStreamEntry(redis, r, { kind: 'final', finishReason: 'length', usage: usage(2), tokens: 2, text: '!' }), 'written');
  assert.equal(await appendStreamEntry(redis, r, { kind: 'token', index: 2, id: 7, text: 'c' }), 'ended');
  assert.equal(await appendStreamEntry(redis, r, { kind: 'error', code: 'runtime', message: 'late' }), 'ended');
  assert.equal(await appendStreamEntry(redis, r, { kind: 'final', finishReason: 'length', usage: usage(2), tokens: 2 }), 'ended');
  const entries = (await readStreamEntries(redis, r)).map((e) => e.entry);
  assert.deepEqual(
    entries.map((e) => e.kind),
    ['token', 'token', 'final'],
  );
  assert.ok(entries[2]?.kind === 'final' && entries[2].text === '!');
  const state = await readStreamState(redis, r);
  assert.deepEqual(state.tokenIds, [5, 6]);
  assert.equal(state.end?.kind, 'final');
  const ttl = await redis.pttl(streamKey(r));
  assert.ok(ttl > 3_500_000 && ttl <= 3_600_000, `ttl ${ttl}`);
});

test('an error entry may end the stream after any number of tokens; concurrent writers never duplicate', async () => {
  assert.equal(await appendStreamEntry(redis, 'w2', { kind: 'error', code: 'not-found', message: 'x' }), 'written');
  assert.equal((await readStreamState(redis, 'w2')).end?.kind, 'error');
  // two "workers" on their own connections racing over the same 50 indexes
  const other = connectRedis(server.url);
  const worker = async (conn: Redis, name: string) => {
    const out = [];
    for (let i = 0; i < 50; i++) out.push(await appendStreamEntry(conn, 'w3', { kind: 'token', index: i, id: i, text: name }));
    return out;
  };
  const outcomes = (await Promise.all([worker(redis, 'a'), worker(other, 'b')])).flat();
  await other.quit();
  assert.equal(outcomes.filter((o) => o === 'written').length, 50);
  assert.deepEqual(
    (await readStreamState(redis, 'w3')).tokenIds,
    Array.from({ length: 50 }, (_, i) => i),
  );
});

test('a stream holding an entry no worker wrote is refused', async () => {
  await redis.xadd(streamKey('w4'), '*', 'hello', 'world');
  await assert.rejects(appendStreamEntry(redis, 'w4', { kind: 'token', index: 0, id: 1, text: '' }), /neither a token nor an end entry/);
});

test('a prompt entry goes first only, token 0 follows it, and readers skip it; token logprobs round-trip (-Infinity as null)', async () => {
  const r = 'w5';
  const prompt: StreamEntry = {
    kind: 'prompt',
    logprobs: [
      null,
      {
        id: 7,
        logprob: -1.25,
        top: [
          { id: 3, logprob: -0.5 },
          { id: 7, logprob: -1.25 },
        ],
      },
    ],
  };
  assert.equal(await appendStreamEntry(redis, r, prompt), 'written');
  assert.equal(await appendStreamEntry(redis, r, prompt), 'exists', 'written once');
  await assert.rejects(appendStreamEntry(redis, r, { kind: 'token', index: 1, id: 5, text: 'a' }), /gap/);
  const token: StreamEntry = {
    kind: 'token',
    index: 0,
    id: 5,
    text: 'a',
    logprob: -0.125,
    top: [
      { id: 5, logprob: -0.125 },
      { id: 9, logprob: -Infinity },
    ],
  };
  assert.equal(await appendStreamEntry(redis, r, token), 'written');
  assert.equal(await appendStreamEntry(redis, r, prompt), 'exists', 'never after a token');
  assert.equal(await appendStreamEntry(redis, r, { kind: 'final', finishReason: 'length', usage: usage(1), tokens: 1 }), 'written');
  assert.deepEqual(
    (await readStreamEntries(redis, r)).map((e) => e.entry),
    [prompt, token, { kind: 'final', finishReason: 'length', usage: usage(1), tokens: 1 }],
  );
  assert.deepEqual((await readStreamState(redis, r)).tokenIds, [5]);
  assert.deepEqual(
    decodeStreamEntry(encodeStreamEntry({ kind: 'token', index: 2, id: 1, text: '' })),
    { kind: 'token', index: 2, id: 1, text: '' },
    'no lp: no logprob fields',
  );
  // a prompt entry into a stream that has ended is refused like any entry
  assert.equal(await appendStreamEntry(redis, 'w6', { kind: 'final', finishReason: 'stop', usage: usage(0), tokens: 0 }), 'written');
  assert.equal(await appendStreamEntry(redis, 'w6', prompt), 'ended');
});

test("choice streams: choice 0 is the request's stream, choice i its own key, each with the same rules", async () => {
  assert.equal(choiceStreamId('req9', 0), 'req9');
  assert.equal(streamKey(choiceStreamId('req9', 2)), 'csa2:stream:req9:2');
  assert.equal(await appendStreamEntry(redis, choiceStreamId('req9', 2), { kind: 'token', index: 0, id: 1, text: 'x' }), 'written');
  assert.equal(await redis.xlen('csa2:stream:req9:2'), 1);
  assert.equal(await redis.exists('csa2:stream:req9'), 0);
});
