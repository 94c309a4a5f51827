/**
 * @module chaos/support
 * What the chaos tests share: requests with a test key, an SSE reader that keeps the events and the
 * comment lines with their times, process memory from /proc, polling, and a look at the job
 * payloads Redis holds.
 */
import { readFileSync } from 'node:fs';
import type { Redis } from '@csa2/jobs';
import { API_KEY, type Pipeline } from '../harness/pipeline.js';
import { pollUntil } from '@csa2/jobs/testing';

export const headers = (key = API_KEY): Record<string, string> => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });

export function postJson(pipe: Pipeline, path: string, body: unknown, key = API_KEY, init: RequestInit = {}): Promise<Response> {
  return fetch(`${pipe.url}${path}`, {
    method: 'POST',
    headers: headers(key),
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(60_000),
    ...init,
  });
}

export async function getJson(pipe: Pipeline, path: string, key = API_KEY): Promise<{ status: number; body: Record<string, unknown> }> {
  const r = await fetch(`${pipe.url}${path}`, { headers: headers(key), signal: AbortSignal.timeout(20_000) });
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls until `check` returns something other than undefined; fails after `timeoutMs` (@csa2/jobs/testing pollUntil). */
export function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 30_000, everyMs = 50): Promise<T> {
  return pollUntil(what, check, { timeoutMs, everyMs });
}

/** A streamed completion read event by event: data payloads and comment lines, each with its time. */
export interface SseRead {
  readonly data: { atMs: number; data: string }[];
  readonly comments: { atMs: number; text: string }[];
  /** Resolves when the stream ended (or was cancelled); the text of an error event, if any. */
  readonly done: Promise<void>;
  cancel(): Promise<void>;
}

export function readSse(response: Response): SseRead {
  const data: { atMs: number; data: string }[] = [];
  const comments: { atMs: number; text: string }[] = [];
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  const done = (async () => {
    try {
      for (;;) {
        const { value, done: ended } = await reader.read();
        if (ended) return;
        buffered += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffered.indexOf('\n\n')) >= 0) {
          const event = buffered.slice(0, cut);
          buffered = buffered.slice(cut + 2);
          if (event.startsWith(':')) comments.push({ atMs: Date.now(), text: event.slice(1).trim() });
          else if (event.startsWith('data: ')) data.push({ atMs: Date.now(), data: event.slice(6) });
        }
      }
    } catch {
      // cancelled or cut: the caller knows
    }
  })();
  return { data, comments, done, cancel: () => reader.cancel().catch(() => undefined) };
}

/** VmHWM (peak RSS) of a process, in MB. */
export function peakRssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1] ?? Number.NaN) / 1024;
}

/** The largest job payload (BullMQ's `data` field) of a queue, in bytes, and its job id. */
export async function largestPayload(redis: Redis, queueName: string): Promise<{ bytes: number; jobId: string }> {
  let largest = { bytes: 0, jobId: '' };
  const prefix = `bull:${queueName}:`;
  for (const key of await redis.keys(`${prefix}*`)) {
    const rest = key.slice(prefix.length);
    if (rest.includes(':') || (await redis.type(key)) !== 'hash') continue; // job hashes only
    const bytes = await redis.hstrlen(key, 'data');
    if (bytes > largest.bytes) largest = { bytes, jobId: rest };
  }
  return largest;
}
