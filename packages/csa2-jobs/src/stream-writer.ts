/**
 * @module stream-writer
 * The writing side of a request's token stream (format in ./stream.ts), exactly-once under retries.
 *
 * Every append runs one Lua script that looks at the stream's last entry and decides atomically:
 *   - the stream already ended (a final or error entry)   → nothing written, 'ended'
 *   - a token entry with this index (or a later one) exists → nothing written, 'exists'
 *   - the index would leave a gap                         → nothing written, 'gap' (a bug: refused)
 *   - otherwise                                           → XADD, then PEXPIRE the key, 'written'
 * A final entry is appended like token index n (it must follow exactly n token entries); an error
 * entry is appended whenever the stream has not ended; a prompt entry only into an empty stream
 * ('exists' otherwise), and token 0 may follow it. So even two workers racing on the same
 * request (a stalled job picked up again while its first worker still runs) never duplicate an
 * index, never write after the end, and never end a stream twice.
 */
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { streamKey, STREAM_TTL_SECONDS } from './queues.js';
import { decodeStreamEntry, encodeStreamEntry, type StreamEntry } from './stream.js';

/**
 * KEYS[1] stream; ARGV[1] index the entry must take ('-1' = any, for error entries; '-2' = first, for
 * a prompt entry); ARGV[2] ttl ms; ARGV[3..] fields.
 */
const APPEND_SCRIPT = `
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local nextIndex = 0
if #last > 0 then
  local fields = last[1][2]
  local idx = nil
  for j = 1, #fields, 2 do
    local f = fields[j]
    if f == 'done' or f == 'error' then return 'ended' end
    if f == 'i' then idx = tonumber(fields[j + 1]) end
    if f == 'plp' then idx = -1 end
  end
  if idx == nil then return 'foreign' end
  nextIndex = idx + 1
end
local want = tonumber(ARGV[1])
if want == -2 and #last > 0 then return 'exists' end
if want >= 0 then
  if want < nextIndex then return 'exists' end
  if want > nextIndex then return 'gap' end
end
redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 'written'
`;
const APPEND_SHA = createHash('sha1').update(APPEND_SCRIPT).digest('hex');

export type AppendOutcome = 'written' | 'exists' | 'ended';

/** A stream that cannot be appended to as asked (a gap, or an entry no worker wrote): a bug, never retried. */
export class StreamStateError extends Error {
  readonly code = 'stream-invalid';
  constructor(message: string) {
    super(message);
    this.name = 'StreamStateError';
  }
}

/** The stream's TTL, refreshed on every append. @defaultValue STREAM_TTL_SECONDS (1 h) */
export const STREAM_TTL_MS = STREAM_TTL_SECONDS * 1000;

async function runAppend(redis: Redis, key: string, args: string[]): Promise<unknown> {
  try {
    return await redis.evalsha(APPEND_SHA, 1, key, ...args);
  } catch (err) {
    if (err instanceof Error && err.message.startsWith('NOSCRIPT')) return redis.eval(APPEND_SCRIPT, 1, key, ...args);
    throw err;
  }
}

/**
 * Appends `entry` to the stream `requestId` (a request id, or a choice's stream id: choiceStreamId)
 * under the rules above. Token entries take their own index; a final entry takes index
 * `entry.tokens`; an error entry goes anywhere before the end; a prompt entry first.
 * Throws StreamStateError on a gap or a foreign last entry; Redis errors propagate (transient).
 */
export async function appendStreamEntry(redis: Redis, requestId: string, entry: StreamEntry, ttlMs: number = STREAM_TTL_MS): Promise<AppendOutcome> {
  const index = entry.kind === 'token' ? entry.index : entry.kind === 'final' ? entry.tokens : entry.kind === 'prompt' ? -2 : -1;
  const key = streamKey(requestId);
  const r = await runAppend(redis, key, [String(index), String(Math.max(1, Math.round(ttlMs))), ...encodeStreamEntry(entry)]);
  if (r === 'written' || r === 'exists' || r === 'ended') return r;
  if (r === 'gap') throw new StreamStateError(`stream ${key}: ${entry.kind} entry at index ${index} would leave a gap`);
  if (r === 'foreign') throw new StreamStateError(`stream ${key}: its last entry is neither a token nor an end entry`);
  throw new StreamStateError(`stream ${key}: unexpected append result ${String(r)}`);
}

/** What a request's stream holds so far. */
export interface StreamState {
  /** Token ids of the token entries, by index (0..n-1). */
  readonly tokenIds: readonly number[];
  /** The final or error entry that ended the stream, or null while it is open. */
  readonly end: Extract<StreamEntry, { kind: 'final' | 'error' }> | null;
}

/** Reads the whole stream (one XRANGE; streams hold at most max_tokens + 2 entries). A prompt entry is skipped. */
export async function readStreamState(redis: Redis, requestId: string): Promise<StreamState> {
  const key = streamKey(requestId);
  const raw = await redis.xrange(key, '-', '+');
  const tokenIds: number[] = [];
  let end: StreamState['end'] = null;
  for (const [, fields] of raw) {
    const e = decodeStreamEntry(fields);
    if (e.kind === 'prompt') continue;
    if (e.kind === 'token') {
      if (e.index !== tokenIds.length) throw new StreamStateError(`stream ${key}: token index ${e.index} where ${tokenIds.length} was expected`);
      tokenIds.push(e.id);
    } else {
      end = e;
      break;
    }
  }
  return { tokenIds, end };
}
