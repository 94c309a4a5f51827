/**
 * @module batch/batch-config
 * Settings of the Files and Batch API, read once from the environment with the gateway's other
 * settings (a bad value names its variable). Every size and duration carries its unit.
 */
import { EnvConfigError, MAX_FAIR_WEIGHT, MIN_FAIR_WEIGHT, envInt, envOptionalNumber, type Env } from '@csa2/jobs';

export interface BatchConfig {
  /** CSA2_MAX_FILE_BYTES: largest uploaded file (413 past it). @defaultValue 100 MiB */
  readonly maxFileBytes: number;
  /** CSA2_UPLOAD_CONCURRENCY: uploads buffered at once per gateway (429 past it). @defaultValue 4 */
  readonly uploadConcurrency: number;
  /** CSA2_BATCH_MAX_LINES: requests in one batch input file. @defaultValue 50000 (OpenAI's limit) */
  readonly maxLines: number;
  /** CSA2_BATCH_CONCURRENCY: batches one gateway drives at once; 0 = this gateway drives none. @defaultValue 4 */
  readonly concurrency: number;
  /** CSA2_BATCH_WINDOW_LINES: lines of one batch on the queues at once. @defaultValue 16 */
  readonly windowLines: number;
  /**
   * CSA2_BATCH_WEIGHT: a tenant's batch lines are fair-queued as a flow of their own
   * (`<tenant>/batch`, fair-priority) with this weight relative to its interactive requests': they fill
   * what interactive work leaves and, while it waits, get about this share. @defaultValue 0.01
   */
  readonly weight: number;
  /** CSA2_BATCH_LINE_ATTEMPTS: tries of a line whose failure is transient. @defaultValue 3 */
  readonly lineAttempts: number;
  /** CSA2_BATCH_POLL_MS: how often a batch checks cancel, expiry and documents it waits for. @defaultValue 500 */
  readonly pollMs: number;
  /** CSA2_BATCH_MAX_WINDOW_MS: longest `completion_window` accepted. @defaultValue 7 days */
  readonly maxCompletionWindowMs: number;
  /** CSA2_BATCH_LOCK_DURATION_MS: lock of the gateway driving a batch; a gateway that died hands it over after about this long. @defaultValue 30000 */
  readonly lockDurationMs: number;
  /** CSA2_BATCH_STALLED_INTERVAL_MS: how often gateways look for batches whose driver died. @defaultValue 15000 */
  readonly stalledIntervalMs: number;
  /** CSA2_BATCH_CANCEL_WAIT_MS: on cancel or expiry, how long running lines get to stop before they are written off. @defaultValue 30000 */
  readonly cancelWaitMs: number;
}

const MIB = 1024 * 1024;
const DAY_MS = 24 * 3600 * 1000;

export function loadBatchConfig(env: Env): BatchConfig {
  const lockDurationMs = envInt(env, 'CSA2_BATCH_LOCK_DURATION_MS', 30_000, { min: 1000 });
  const stalledIntervalMs = envInt(env, 'CSA2_BATCH_STALLED_INTERVAL_MS', Math.min(15_000, lockDurationMs), { min: 500 });
  if (stalledIntervalMs > lockDurationMs)
    throw new EnvConfigError('CSA2_BATCH_STALLED_INTERVAL_MS', `must not exceed CSA2_BATCH_LOCK_DURATION_MS (${lockDurationMs}), got ${stalledIntervalMs}`);
  return {
    maxFileBytes: envInt(env, 'CSA2_MAX_FILE_BYTES', 100 * MIB, { min: 1024 }),
    uploadConcurrency: envInt(env, 'CSA2_UPLOAD_CONCURRENCY', 4, { min: 1 }),
    maxLines: envInt(env, 'CSA2_BATCH_MAX_LINES', 50_000, { min: 1, max: 1_000_000 }),
    concurrency: envInt(env, 'CSA2_BATCH_CONCURRENCY', 4, { min: 0, max: 256 }),
    windowLines: envInt(env, 'CSA2_BATCH_WINDOW_LINES', 16, { min: 1, max: 4096 }),
    weight: envOptionalNumber(env, 'CSA2_BATCH_WEIGHT', { min: MIN_FAIR_WEIGHT, max: MAX_FAIR_WEIGHT }) ?? 0.01,
    lineAttempts: envInt(env, 'CSA2_BATCH_LINE_ATTEMPTS', 3, { min: 1, max: 20 }),
    pollMs: envInt(env, 'CSA2_BATCH_POLL_MS', 500, { min: 10 }),
    maxCompletionWindowMs: envInt(env, 'CSA2_BATCH_MAX_WINDOW_MS', 7 * DAY_MS, { min: 1000 }),
    lockDurationMs,
    stalledIntervalMs,
    cancelWaitMs: envInt(env, 'CSA2_BATCH_CANCEL_WAIT_MS', 30_000, { min: 0 }),
  };
}
