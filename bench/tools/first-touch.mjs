#!/usr/bin/env node
/**
 * How fast this machine hands a process new memory: copies MB megabytes (default 143, a 1M-token tiny-width
 * artifact) from a 4 MiB buffer into a fresh Uint8Array (every page faulted in on first touch), then again into
 * the same array (pages present), three times. Loading a document into memory the process never held before
 * cannot be faster than the first figure, whatever the reader does. A diagnostic.
 *
 *   node bench/tools/first-touch.mjs [MB]        (run it under the workers' MALLOC_MMAP_THRESHOLD_ too)
 */
const mb = Number(process.argv[2] ?? 143);
if (!(mb > 0)) {
  console.error('usage: node bench/tools/first-touch.mjs [MB]');
  process.exit(2);
}
const N = Math.round(mb * 1e6);
const src = new Uint8Array(4 << 20).fill(7);
const copy = (b) => {
  for (let o = 0; o < N; o += src.length) b.set(src.subarray(0, Math.min(src.length, N - o)), o);
};
for (let i = 0; i < 3; i++) {
  const t0 = performance.now();
  const b = new Uint8Array(N);
  copy(b);
  const t1 = performance.now();
  copy(b);
  const t2 = performance.now();
  const rate = (ms) => `${(N / 1e6 / (ms / 1e3)).toFixed(0)} MB/s`;
  console.log(
    `${mb} MB: into fresh memory ${(t1 - t0).toFixed(0)} ms (${rate(t1 - t0)}), into the same memory again ${(t2 - t1).toFixed(0)} ms (${rate(t2 - t1)})`,
  );
}
