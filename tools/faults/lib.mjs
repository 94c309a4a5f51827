// Shared helpers of the fault reproductions (tools/faults/*.mjs): the pipeline harness of test/ (compiled
// by `npm run build`), process memory from /proc, Redis memory, and JSON requests with the test keys.
import { readFileSync } from 'node:fs';
import { API_KEY, OTHER_API_KEY, Pipeline, seededTestModel } from '../../test/dist/harness/pipeline.js';

export { API_KEY, OTHER_API_KEY, Pipeline, seededTestModel };

/** VmRSS and VmHWM (peak) of a process, in MB. */
export function processMemoryMb(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssMb: kb('VmRSS') / 1024, peakMb: kb('VmHWM') / 1024 };
}

/** used_memory of a Redis (INFO memory), in MB. */
export async function redisMemoryMb(redis) {
  const info = await redis.info('memory');
  return Number(/^used_memory:(\d+)/m.exec(info)?.[1] ?? NaN) / 1e6;
}

export function headers(key = API_KEY) {
  return { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
}

export async function postJson(pipe, path, body, key = API_KEY, init = {}) {
  return fetch(`${pipe.url}${path}`, { method: 'POST', headers: headers(key), body: typeof body === 'string' ? body : JSON.stringify(body), ...init });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function fmt(n, digits = 1) {
  return Number.isFinite(n) ? n.toFixed(digits) : String(n);
}
