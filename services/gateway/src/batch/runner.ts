/**
 * @module batch/runner
 * Drives one batch from `validating` to its end state. It runs as the processor of the batch's
 * driver job (batch/batch-worker.ts), so exactly one gateway drives a batch at a time and another
 * one takes over when it dies. Everything it decides is in Redis or the store, so a driver that
 * starts again (restart, takeover) continues where the last one stopped:
 *
 * 1. the input file is read and parsed again (it is immutable and pinned while the batch runs);
 *    bad lines get their error entries at once;
 * 2. lines are submitted in order, at most CSA2_BATCH_WINDOW_LINES at a time; lines already
 *    submitted before a restart (their attempt is in Redis) are followed first — under the same
 *    request ids, so nothing runs twice;
 * 3. each finished line's result is stored (once) and the line marked done (once), counts included;
 *    a transient failure is retried under the next attempt (new request id) up to
 *    CSA2_BATCH_LINE_ATTEMPTS; a full queue or a document still being ingested only waits;
 * 4. every CSA2_BATCH_POLL_MS the status and the expiry are checked: on cancel or expiry the running
 *    lines get their cancel keys and CSA2_BATCH_CANCEL_WAIT_MS to stop (those that finish meanwhile
 *    count), and every line not done is written off (`batch_cancelled` / `batch_expired`);
 * 5. finalization writes the output and error files (ids derived from the batch, so a repeated
 *    finalization writes the same files), moves to the end state, then drops the per-line data.
 */
import type { GatewayDeps } from '../capabilities.js';
import { ApiError } from '../errors.js';
import { getFileContent } from '../files/file-store.js';
import type { BatchConfig } from './batch-config.js';
import { TERMINAL_STATUSES, type BatchRecord } from './batch-object.js';
import type { BatchStore, LineOutcome } from './batch-store.js';
import { parseInputFile, type InputLine } from './input-lines.js';
import { cancelLine, runDocumentLine, runGenerationLine, type LineContext, type LineExecutionDeps, type LineRun } from './line-execution.js';
import { lineRequestId } from './keys.js';
import { apiErrorLine, dropLineResults, notRunLine, responseLine, storeLineResult, writeBatchFiles, type BatchOutputLine } from './line-results.js';

/** The capabilities this module takes. */
export type RunnerDeps = Pick<GatewayDeps, 'limits' | 'logger' | 'store'> & LineExecutionDeps;

export interface BatchRunnerDeps {
  readonly deps: RunnerDeps;
  readonly batches: BatchStore;
  readonly config: BatchConfig;
}

/** 'ended': the batch is in an end state (or gone); 'detached': the driver stopped (shutdown) and the batch goes on elsewhere. */
export type RunResult = 'ended' | 'detached';

type StopReason = 'cancelled' | 'expired';

interface Running {
  readonly attempt: number;
  readonly abort: AbortController;
}

/** Drives the batch until it ends or `signal` aborts. Throws on infrastructure failures (the driver job retries). */
export async function runBatch(runner: BatchRunnerDeps, batchId: string, signal: AbortSignal): Promise<RunResult> {
  const record = await runner.batches.get(batchId);
  if (record === null) return 'ended';
  return new BatchRun(runner, record, signal).run();
}

class BatchRun {
  private readonly ctx: LineContext;
  private lines: readonly InputLine[] = [];
  private done = new Map<number, LineOutcome>();
  private attempts = new Map<number, number>();
  private pending: number[] = [];
  private readonly notBefore = new Map<number, number>();
  private pausedUntilMs = 0;
  private readonly running = new Map<number, Running>();
  private readonly settled: { index: number; run: LineRun }[] = [];
  private wake: (() => void) | null = null;

  constructor(
    private readonly runner: BatchRunnerDeps,
    private record: BatchRecord,
    private readonly signal: AbortSignal,
  ) {
    this.ctx = {
      deps: runner.deps,
      batches: runner.batches,
      config: runner.config,
      batchId: record.id,
      tenant: record.tenant,
      endpoint: record.endpoint,
      expiresAtMs: record.expiresAtMs,
    };
  }

  private get log() {
    return this.runner.deps.logger;
  }

  async run(): Promise<RunResult> {
    const { batches } = this.runner;
    const id = this.record.id;
    if (TERMINAL_STATUSES.has(this.record.status)) {
      await this.cleanup();
      return 'ended';
    }
    if (this.record.status === 'finalizing') return this.finalize('completed');
    if (!(await this.loadInput())) return 'ended';
    // the total is set whatever the status (a batch cancelled before its driver started has lines too)
    if (this.record.total !== this.lines.length) await batches.setFields(id, { total: this.lines.length });
    if (this.record.status === 'validating') {
      await batches.transition(id, ['validating'], 'in_progress', { in_progress_at_ms: Date.now() });
      this.log.info({ batchId: id, tenant: this.record.tenant, lines: this.lines.length }, 'batch in progress');
    }
    this.done = await batches.doneLines(id);
    this.attempts = await batches.attempts(id);
    for (const line of this.lines) {
      if (line.problem !== null && !this.done.has(line.index))
        await this.record_(line.index, false, notRunLine(id, line.index, line.customId, line.problem.code, line.problem.message));
    }
    const open = this.lines.filter((l) => l.problem === null && !this.done.has(l.index)).map((l) => l.index);
    // lines submitted before a restart first: they are on the queues already
    this.pending = [...open.filter((i) => this.attempts.has(i)), ...open.filter((i) => !this.attempts.has(i))];
    return this.loop();
  }

  /** Reads and parses the input; false when the batch failed for it (or ended meanwhile). */
  private async loadInput(): Promise<boolean> {
    const { deps, config, batches } = this.runner;
    const r = this.record;
    const bytes = await getFileContent(deps.store, r.tenant, r.inputFileId);
    const parsed =
      bytes === null
        ? { lines: [], error: { code: 'input_file_missing', message: `the input file ${r.inputFileId} is gone`, param: 'input_file_id', line: null } }
        : parseInputFile(bytes, { endpoint: r.endpoint, maxLines: config.maxLines, maxLineBytes: deps.limits.maxBodyBytes });
    if (parsed.error !== null) {
      await batches.transition(r.id, ['validating', 'in_progress', 'cancelling'], 'failed', {
        failed_at_ms: Date.now(),
        errors: JSON.stringify([parsed.error]),
      });
      this.log.info({ batchId: r.id, code: parsed.error.code }, 'batch failed: unusable input file');
      await this.cleanup();
      return false;
    }
    this.lines = parsed.lines;
    return true;
  }

  private async loop(): Promise<RunResult> {
    const { batches, config } = this.runner;
    for (;;) {
      if (this.signal.aborted) return this.detach();
      const status = await batches.status(this.record.id);
      if (status === null) {
        this.detach();
        return 'ended';
      }
      if (status === 'cancelling') return this.stop('cancelled');
      if (status === 'finalizing') return this.finalize('completed');
      if (status !== 'in_progress') {
        this.detach();
        return 'ended';
      }
      if (Date.now() >= this.record.expiresAtMs) return this.stop('expired');
      this.fill();
      if (this.running.size === 0 && this.pending.length === 0 && this.settled.length === 0) return this.finalize('completed');
      await this.waitForAny(config.pollMs);
      for (const s of this.settled.splice(0)) await this.handle(s.index, s.run, null);
    }
  }

  private lineOf(index: number): InputLine {
    return this.lines[index] as InputLine;
  }

  /** Starts pending lines up to the window; skips those that wait (a document not ready, a full queue). */
  private fill(): void {
    const now = Date.now();
    if (now < this.pausedUntilMs) return;
    for (let i = 0; i < this.pending.length && this.running.size < this.runner.config.windowLines; ) {
      const index = this.pending[i] as number;
      if ((this.notBefore.get(index) ?? 0) > now) {
        i++;
        continue;
      }
      this.pending.splice(i, 1);
      this.start(index);
    }
  }

  private start(index: number): void {
    const attempt = this.attempts.get(index) ?? 1;
    const abort = new AbortController();
    this.running.set(index, { attempt, abort });
    const line = this.lineOf(index);
    const body = line.body ?? {};
    const exec = this.record.endpoint === '/v1/documents' ? runDocumentLine : runGenerationLine;
    exec(this.ctx, { index, body }, attempt, abort.signal).then(
      (run) => this.settle(index, run),
      (err: unknown) => this.settle(index, { kind: 'retry', requestId: '', error: toError(err) }),
    );
  }

  private settle(index: number, run: LineRun): void {
    this.running.delete(index);
    this.settled.push({ index, run });
    this.wake?.();
  }

  private async waitForAny(ms: number): Promise<void> {
    if (this.settled.length > 0) return;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.signal.removeEventListener('abort', done);
        this.wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.signal.addEventListener('abort', done, { once: true });
      this.wake = done;
    });
  }

  /** Records or requeues a settled line. `stopping` set: the batch is being cancelled or expired. */
  private async handle(index: number, run: LineRun, stopping: StopReason | null): Promise<void> {
    const id = this.record.id;
    const line = this.lineOf(index);
    const attempt = this.attempts.get(index) ?? 1;
    switch (run.kind) {
      case 'ok':
        await this.record_(index, true, responseLine(id, index, line.customId, run), run.usage);
        return;
      case 'error':
        await this.record_(index, false, apiErrorLine(id, index, line.customId, run.requestId, run.error));
        return;
      case 'retry':
      case 'cancelled':
        if (stopping !== null) {
          await this.writeOff(index, stopping);
          return;
        }
        if (run.kind === 'retry' && attempt >= this.runner.config.lineAttempts) {
          await this.record_(index, false, apiErrorLine(id, index, line.customId, run.requestId, run.error));
          return;
        }
        this.log.info({ batchId: id, index, attempt, reason: run.kind === 'retry' ? run.error.message : 'cancelled' }, 'batch line: another attempt');
        this.attempts.set(index, attempt + 1);
        this.pending.unshift(index);
        return;
      case 'later':
        if (stopping !== null) {
          await this.writeOff(index, stopping);
          return;
        }
        if (run.reason === 'queue-full') {
          this.pausedUntilMs = Date.now() + this.runner.config.pollMs;
          this.pending.unshift(index);
        } else {
          this.notBefore.set(index, Date.now() + this.runner.config.pollMs);
          this.pending.push(index);
        }
        return;
      case 'detached':
        if (stopping !== null) await this.writeOff(index, stopping);
        return;
    }
  }

  /** Stores a line's result (once) and marks it done (once). */
  private async record_(
    index: number,
    ok: boolean,
    line: BatchOutputLine,
    usage?: { promptTokens: number; completionTokens: number; cachedTokens: number },
  ): Promise<void> {
    const { deps, batches } = this.runner;
    await storeLineResult(deps.store, this.record.tenant, this.record.id, { index, ok, line });
    await batches.markLineDone(this.record.id, index, ok ? 'ok' : 'err', usage);
    this.done.set(index, ok ? 'ok' : 'err');
  }

  private async writeOff(index: number, reason: StopReason): Promise<void> {
    const line = this.lineOf(index);
    const message =
      reason === 'expired'
        ? 'This request could not be executed before the completion window expired.'
        : 'This request was not executed because the batch was cancelled.';
    await this.record_(index, false, notRunLine(this.record.id, index, line.customId, reason === 'expired' ? 'batch_expired' : 'batch_cancelled', message));
  }

  /** Cancel or expiry: running lines are asked to stop, then everything not done is written off. */
  private async stop(reason: StopReason): Promise<RunResult> {
    const { deps, config } = this.runner;
    this.log.info({ batchId: this.record.id, reason, running: this.running.size, pending: this.pending.length }, 'batch stopping');
    for (const s of this.settled.splice(0)) await this.handle(s.index, s.run, reason);
    if (this.record.endpoint !== '/v1/documents') {
      const endpoint = this.record.endpoint === '/v1/chat/completions' ? 'chat' : 'completions';
      await Promise.all([...this.running.entries()].map(([index, r]) => cancelLine(deps, lineRequestId(this.record.id, endpoint, index, r.attempt))));
    }
    const deadline = Date.now() + config.cancelWaitMs;
    while (this.running.size > 0 && Date.now() < deadline && !this.signal.aborted) {
      await this.waitForAny(Math.min(config.pollMs, Math.max(1, deadline - Date.now())));
      for (const s of this.settled.splice(0)) await this.handle(s.index, s.run, reason);
    }
    if (this.signal.aborted) return this.detach();
    for (const s of this.settled.splice(0)) await this.handle(s.index, s.run, reason);
    for (const [index, r] of [...this.running.entries()]) {
      r.abort.abort();
      this.running.delete(index);
      await this.writeOff(index, reason);
    }
    for (const index of this.pending.splice(0)) if (!this.done.has(index)) await this.writeOff(index, reason);
    return this.finalize(reason);
  }

  /** Writes the files and moves to the end state (each step safe to repeat). */
  private async finalize(outcome: 'completed' | StopReason): Promise<RunResult> {
    const { deps, batches } = this.runner;
    const id = this.record.id;
    let atMs: number;
    if (outcome === 'completed') {
      await batches.transition(id, ['in_progress'], 'finalizing', { finalizing_at_ms: Date.now() });
      const now = await batches.get(id);
      if (now === null || now.status !== 'finalizing') return 'ended';
      this.record = now;
      atMs = now.finalizingAtMs;
    } else {
      atMs = outcome === 'cancelled' ? this.record.cancellingAtMs || Date.now() : this.record.expiresAtMs;
    }
    const files = await writeBatchFiles(deps.store, this.record.tenant, id, atMs);
    const fields = { output_file_id: files.output?.id ?? '', error_file_id: files.error?.id ?? '' };
    const endedAt = Date.now();
    const moved =
      outcome === 'completed'
        ? await batches.transition(id, ['finalizing'], 'completed', { ...fields, completed_at_ms: endedAt })
        : outcome === 'cancelled'
          ? await batches.transition(id, ['cancelling'], 'cancelled', { ...fields, cancelled_at_ms: endedAt })
          : await batches.transition(id, ['in_progress', 'cancelling'], 'expired', { ...fields, expired_at_ms: endedAt });
    if (moved) {
      const r = await batches.get(id);
      this.log.info({ batchId: id, status: r?.status, completed: r?.completed, failed: r?.failed }, 'batch ended');
    }
    await this.cleanup();
    return 'ended';
  }

  private async cleanup(): Promise<void> {
    await this.runner.batches.cleanup(this.record);
    await dropLineResults(this.runner.deps.store, this.record.tenant, this.record.id);
  }

  private detach(): RunResult {
    for (const r of this.running.values()) r.abort.abort();
    this.running.clear();
    return 'detached';
  }
}

/** An unexpected throw inside a line run: transient (the next attempt decides). */
function toError(err: unknown): ApiError {
  return new ApiError(500, err instanceof Error ? err.message : String(err), { code: 'batch_line_failed' });
}
