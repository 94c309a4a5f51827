/**
 * @module key-limiter
 * Per-key limits (key-limits-config), enforced in Redis so that every gateway replica shares them,
 * each admission one Lua script (atomic: a request is refused or counted against every limit):
 *
 * - requests and tokens per minute: token buckets of `rpm` and `tpm` that refill continuously
 *   (the whole limit over 60 s), `csa2:limit:<keyId>:rpm|tpm`;
 * - concurrent completions: leases in `csa2:limit:<keyId>:inflight` (a zset scored by expiry, so a
 *   lease of a gateway that died expires after CSA2_REQUEST_TIMEOUT_MS + 60 s);
 * - queued documents: the key's document job ids in `csa2:limit:<keyId>:documents`; those finished
 *   (completed or failed) or gone are dropped when the count is checked.
 *
 * A refusal is a 429 `rate_limit_exceeded` naming the limit, with `Retry-After` (seconds until it
 * could pass) and OpenAI's `x-ratelimit-limit-*`, `x-ratelimit-remaining-*`, `x-ratelimit-reset-*`
 * headers (requests, tokens), which successful answers carry too. A request whose tokens alone
 * exceed `tpm` can never pass: 429 without Retry-After. Keys are named by a digest (`keyId`), never
 * stored.
 */
import { createHash } from 'node:crypto';
import { PREFILL_QUEUE, type Redis } from '@csa2/jobs';
import { ApiError } from './errors.js';
import type { KeyLimits } from './key-limits-config.js';

/** The id of an API key in Redis keys and logs: the first 16 hex characters of its SHA-256. */
export function keyIdOf(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex').slice(0, 16);
}

const MINUTE_MS = 60_000;

/**
 * KEYS[1] rpm bucket, KEYS[2] tpm bucket, KEYS[3] counted set (inflight leases or document jobs)
 * ARGV[1] now ms, ARGV[2] rpm (0 none), ARGV[3] tpm (0 none), ARGV[4] tokens, ARGV[5] set limit (0 none),
 * ARGV[6] set kind ('leases' | 'documents'), ARGV[7] members to add now (leases: the request id; documents: none),
 * ARGV[8] lease expiry ms, ARGV[9] count this admission adds to the set, ARGV[10] job key prefix
 * → { verdict, requests left, tokens left, set size }
 */
const ADMIT = `
local now = tonumber(ARGV[1])
local function level(key, cap)
  if cap <= 0 then return -1 end
  local s = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens = tonumber(s[1])
  local ts = tonumber(s[2])
  if tokens == nil or ts == nil then return cap end
  local refilled = tokens + (now - ts) * cap / ${MINUTE_MS}
  if refilled > cap then refilled = cap end
  return refilled
end
local rpm = tonumber(ARGV[2])
local tpm = tonumber(ARGV[3])
local tokens = tonumber(ARGV[4])
local requestsLeft = level(KEYS[1], rpm)
local tokensLeft = level(KEYS[2], tpm)
local verdict = 'ok'
if tpm > 0 and tokens > tpm then verdict = 'tokens-too-large'
elseif rpm > 0 and requestsLeft < 1 then verdict = 'requests'
elseif tpm > 0 and tokensLeft < tokens then verdict = 'tokens' end
local setLimit = tonumber(ARGV[5])
local adds = tonumber(ARGV[9])
local size = 0
if setLimit > 0 then
  if ARGV[6] == 'leases' then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
    size = redis.call('ZCARD', KEYS[3])
  else
    size = redis.call('ZCARD', KEYS[3])
    if size + adds > setLimit then
      for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
        local job = ARGV[10] .. id
        if redis.call('EXISTS', job) == 0 or redis.call('HEXISTS', job, 'finishedOn') == 1 then redis.call('ZREM', KEYS[3], id) end
      end
      size = redis.call('ZCARD', KEYS[3])
    end
  end
  if verdict == 'ok' and size + adds > setLimit then verdict = ARGV[6] end
end
if verdict == 'ok' then
  if rpm > 0 then
    requestsLeft = requestsLeft - 1
    redis.call('HSET', KEYS[1], 'tokens', requestsLeft, 'ts', now)
    redis.call('PEXPIRE', KEYS[1], ${2 * MINUTE_MS})
  end
  if tpm > 0 then
    tokensLeft = tokensLeft - tokens
    redis.call('HSET', KEYS[2], 'tokens', tokensLeft, 'ts', now)
    redis.call('PEXPIRE', KEYS[2], ${2 * MINUTE_MS})
  end
  if setLimit > 0 and ARGV[6] == 'leases' then
    redis.call('ZADD', KEYS[3], tonumber(ARGV[8]), ARGV[7])
    redis.call('PEXPIREAT', KEYS[3], tonumber(ARGV[8]))
    size = size + 1
  end
end
return { verdict, tostring(requestsLeft), tostring(tokensLeft), size }
`;
const ADMIT_SHA = createHash('sha1').update(ADMIT).digest('hex');

/** What an admitted request carries: the x-ratelimit-* headers, and the release of its lease. */
export interface Admission {
  readonly headers: Readonly<Record<string, string>>;
  /** Ends the request's concurrency lease (a no-op without one; idempotent, best-effort). */
  release(): void;
}

/** OpenAI's duration format for x-ratelimit-reset-*: "20ms", "6s", "1m30s". */
export function formatResetDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`;
  const s = Math.ceil(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${s % 60}s`;
}

interface Verdict {
  readonly verdict: string;
  readonly requestsLeft: number;
  readonly tokensLeft: number;
  readonly size: number;
}

export interface KeyLimiterOptions {
  /** A lease outlives its request at most this long after the request's timeout. */
  readonly leaseMs: number;
  /** BullMQ key prefix of the prefill queue's jobs. @defaultValue 'bull:csa2-prefill:' */
  readonly prefillJobPrefix?: string;
}

export class KeyLimiter {
  constructor(
    private readonly redis: Redis,
    private readonly options: KeyLimiterOptions,
  ) {}

  private keys(keyId: string, set: 'inflight' | 'documents'): string[] {
    return [`csa2:limit:${keyId}:rpm`, `csa2:limit:${keyId}:tpm`, `csa2:limit:${keyId}:${set}`];
  }

  private async run(keys: string[], args: (string | number)[]): Promise<Verdict> {
    const argv = args.map(String);
    let r: unknown;
    try {
      r = await this.redis.evalsha(ADMIT_SHA, keys.length, ...keys, ...argv);
    } catch (err) {
      if (!(err instanceof Error && err.message.startsWith('NOSCRIPT'))) throw err;
      r = await this.redis.eval(ADMIT, keys.length, ...keys, ...argv);
    }
    const [verdict, requestsLeft, tokensLeft, size] = r as [string, string, string, number];
    return { verdict, requestsLeft: Number(requestsLeft), tokensLeft: Number(tokensLeft), size: Number(size) };
  }

  private headers(limits: KeyLimits, v: Verdict): Record<string, string> {
    const h: Record<string, string> = {};
    const bucket = (name: 'requests' | 'tokens', cap: number | null, left: number): void => {
      if (cap === null) return;
      const remaining = Math.max(0, Math.floor(left));
      h[`x-ratelimit-limit-${name}`] = String(cap);
      h[`x-ratelimit-remaining-${name}`] = String(remaining);
      h[`x-ratelimit-reset-${name}`] = formatResetDuration(((cap - Math.max(0, left)) * MINUTE_MS) / cap);
    };
    bucket('requests', limits.requestsPerMinute, v.requestsLeft);
    bucket('tokens', limits.tokensPerMinute, v.tokensLeft);
    return h;
  }

  private refuse(limits: KeyLimits, v: Verdict, tokens: number): never {
    const headers = this.headers(limits, v);
    const retry = (ms: number): Record<string, string> => ({ ...headers, 'retry-after': String(Math.max(1, Math.ceil(ms / 1000))) });
    switch (v.verdict) {
      case 'requests': {
        const cap = limits.requestsPerMinute ?? 1;
        throw new ApiError(429, `Rate limit reached for requests: this key may send ${cap} requests per minute. Please retry after the Retry-After seconds.`, {
          code: 'rate_limit_exceeded',
          param: null,
          headers: retry(((1 - v.requestsLeft) * MINUTE_MS) / cap),
        });
      }
      case 'tokens': {
        const cap = limits.tokensPerMinute ?? 1;
        throw new ApiError(
          429,
          `Rate limit reached for tokens: this key may use ${cap} tokens per minute; this request needs ${tokens} and ${Math.max(0, Math.floor(v.tokensLeft))} are left. Please retry after the Retry-After seconds.`,
          {
            code: 'rate_limit_exceeded',
            headers: retry(((tokens - v.tokensLeft) * MINUTE_MS) / cap),
          },
        );
      }
      case 'tokens-too-large':
        throw new ApiError(
          429,
          `Request too large: it needs ${tokens} tokens and this key may use ${limits.tokensPerMinute ?? 0} tokens per minute. Reduce the prompt or max_tokens.`,
          {
            code: 'request_too_large',
            headers,
          },
        );
      case 'leases':
        throw new ApiError(
          429,
          `Too many concurrent requests: this key may have ${limits.concurrentRequests ?? 0} completions in flight. Please retry once one has finished.`,
          {
            code: 'concurrency_limit_exceeded',
            headers: retry(1000),
          },
        );
      case 'documents':
        throw new ApiError(
          429,
          `Too many queued documents: this key may have ${limits.queuedDocuments ?? 0} documents queued or being encoded (${v.size} now). Please retry once some are ready.`,
          {
            code: 'queued_documents_limit_exceeded',
            headers: retry(5000),
          },
        );
      default:
        throw new ApiError(500, `rate limiter: unexpected verdict ${v.verdict}`);
    }
  }

  /** Admits a completion of `tokens` (prompt + max_tokens) with a concurrency lease, or throws its 429. */
  async admitCompletion(keyId: string, limits: KeyLimits, req: { readonly requestId: string; readonly tokens: number }): Promise<Admission> {
    if (limits.requestsPerMinute === null && limits.tokensPerMinute === null && limits.concurrentRequests === null)
      return { headers: {}, release: () => undefined };
    const now = Date.now();
    const keys = this.keys(keyId, 'inflight');
    const v = await this.run(keys, [
      now,
      limits.requestsPerMinute ?? 0,
      limits.tokensPerMinute ?? 0,
      req.tokens,
      limits.concurrentRequests ?? 0,
      'leases',
      req.requestId,
      now + this.options.leaseMs,
      1,
      '',
    ]);
    if (v.verdict !== 'ok') this.refuse(limits, v, req.tokens);
    let released = limits.concurrentRequests === null;
    return {
      headers: this.headers(limits, v),
      release: () => {
        if (released) return;
        released = true;
        this.redis.zrem(keys[2] as string, req.requestId).catch(() => undefined); // else its lease expires
      },
    };
  }

  /** Admits a POST of `count` documents of `tokens` in all, or throws its 429. */
  async admitDocuments(keyId: string, limits: KeyLimits, req: { readonly count: number; readonly tokens: number }): Promise<Admission> {
    if (limits.requestsPerMinute === null && limits.tokensPerMinute === null && limits.queuedDocuments === null)
      return { headers: {}, release: () => undefined };
    const v = await this.run(this.keys(keyId, 'documents'), [
      Date.now(),
      limits.requestsPerMinute ?? 0,
      limits.tokensPerMinute ?? 0,
      req.tokens,
      limits.queuedDocuments ?? 0,
      'documents',
      '',
      0,
      req.count,
      this.options.prefillJobPrefix ?? `bull:${PREFILL_QUEUE}:`,
    ]);
    if (v.verdict !== 'ok') this.refuse(limits, v, req.tokens);
    return { headers: this.headers(limits, v), release: () => undefined };
  }

  /** Counts the document jobs just enqueued against the key's queued-documents limit. */
  async countDocumentJobs(keyId: string, limits: KeyLimits, jobIds: readonly string[]): Promise<void> {
    if (limits.queuedDocuments === null || jobIds.length === 0) return;
    const key = `csa2:limit:${keyId}:documents`;
    const now = Date.now();
    await this.redis.zadd(key, ...jobIds.flatMap((id) => [now, id]));
  }
}
