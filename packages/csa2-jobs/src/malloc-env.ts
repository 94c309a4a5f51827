/**
 * @module malloc-env
 * The glibc allocator settings the worker processes run with: `npm start` (scripts/start.mjs), the
 * worker images (infra/docker/Dockerfile), the pipeline harness and the 1M test's roles set exactly
 * these (test/src/infra/malloc-env.test checks the first two against this object). glibc reads them
 * once, at process start.
 *
 * - `MALLOC_MMAP_THRESHOLD_` 1 MiB: an allocation above it is its own mapping, returned to the system
 *   when freed, so the multi-MB buffers of a long context (a 1M-token document, the scans' products, a
 *   replay's attention tables) never stay on the heap. Below it, allocations reuse the heap: a
 *   per-layer graph's intermediates and outputs (512 KiB for a [256, 4, 128] prefill chunk of the served
 *   model or a [32, 4, 1024] decode batch of the dim-1024 model) are allocated and freed on every run,
 *   and as fresh mappings every page of each faulted on first touch — ~10 µs a fault on this project's
 *   2-core VMs. (Setting the threshold also turns off glibc's dynamic threshold, which without it
 *   grows after large frees and keeps freed multi-MB buffers: decoder RSS on a 1M-token context
 *   591 MB unset against 362 MB.)
 *   The heap's top is still trimmed at glibc's default (128 KiB): keeping 8 MiB there
 *   (MALLOC_TRIM_THRESHOLD_) ingested faster (543 against 369 tok/s on the served model) but raised the
 *   1M test's decoder peak to within 3 MB of its bound.
 *
 * Measured, with the attention sessions' arena (RuntimeOptions.attentionArena), against the previous
 * setting (MALLOC_MMAP_THRESHOLD_=131072, no arena): bench/README.md, "Allocation".
 */
export const WORKER_MALLOC_ENV: Readonly<Record<'MALLOC_MMAP_THRESHOLD_', string>> = {
  MALLOC_MMAP_THRESHOLD_: '1048576',
};
