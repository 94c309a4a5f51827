/**
 * @module scheduler/scheduler
 * Continuous batching: the work queues, admission under the KV budget, and the composition of each
 * step (scheduler/scheduler-policy describes the policy it applies).
 *
 * Queues. Submitted work is `preparing` (its async prepare runs: a manifest read, tokenization), then
 * `waiting` (admissible, ordered by priority then submission), then admitted: `loading` (its async
 * load runs) and `active` (it has rows to run), until it finishes. Admission happens as soon as a work
 * is prepared (so that its load overlaps the running step and it is active by the next plan) and
 * between steps, and reserves the work's KV bytes until it finishes; a work whose bytes exceed the whole budget fails
 * at once. Cancelled work leaves at the next step with its partial result.
 *
 * Cost model. Step times are measured: an exponential average of decode-only steps (per decode
 * batch size class) and of the time per prefill row-layer in mixed steps. They predict how many
 * prefill rows a step may run while sequences decode (policy.decodeLatencyFactor).
 */
import { InputError, type Span, type SpanOutput } from '@csa2/core';
import type { SchedulerStats, Histogram } from '../types.js';
import type { SchedulerPolicy } from './scheduler-policy.js';
import type { Work } from './work.js';

/** One planned step: the spans to run and the work each belongs to. */
export interface StepPlan {
  readonly spans: readonly Span[];
  readonly works: readonly Work[];
  readonly decodeRows: number;
  readonly prefillRows: number;
  /** Σ rows × layers of the prefill spans (the cost model's unit). */
  readonly prefillRowLayers: number;
  /** The tenant whose prefill rows the step runs (one a step), or null. */
  readonly prefillTenant: string | null;
}

const STEP_MS_BOUNDS = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];
const ROW_BOUNDS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

class HistogramCounter {
  private readonly counts: number[];
  private total = 0;
  constructor(private readonly bounds: readonly number[]) {
    this.counts = new Array<number>(bounds.length + 1).fill(0);
  }
  observe(v: number): void {
    let i = this.bounds.findIndex((b) => v <= b);
    if (i < 0) i = this.bounds.length;
    this.counts[i] = (this.counts[i] as number) + 1;
    this.total += v;
  }
  snapshot(): Histogram {
    let acc = 0;
    return { bounds: this.bounds, counts: this.counts.map((c) => (acc += c)), sum: this.total };
  }
}

export class Scheduler {
  private readonly preparing = new Set<Work>();
  private readonly waiting: Work[] = [];
  private readonly loading = new Set<Work>();
  private readonly active: Work[] = [];
  private kvInUse = 0;
  /**
   * Prefill time (ms) each tenant has had, for time-fair prefill: a step's prefill rows all belong to
   * the tenant with the least, so a tenant's prompt waits at most its share of time behind another's
   * documents, whatever their rows cost (rows deep in a long document cost more than a prompt's).
   * Kept a while for a tenant gone idle (see placeReturning).
   */
  private readonly prefillMs = new Map<string, number>();
  /** The tenants that had prefill work at the last plan. */
  private prefillTenants = new Set<string>();
  /** The least prefill time among the tenants with prefill work (never decreases): where returning tenants are placed. */
  private prefillClockMs = 0;
  /** The plan number of each prefilling tenant's last turn (a tie goes to the one that waited longest). */
  private readonly lastTurn = new Map<string, number>();
  private plans = 0;
  private readonly stepMs = new HistogramCounter(STEP_MS_BOUNDS);
  private readonly batchRows = new HistogramCounter(ROW_BOUNDS);
  private readonly decodeBatch = new HistogramCounter(ROW_BOUNDS);
  private steps = 0;
  private decodeTokens = 0;
  private prefillTokens = 0;
  private refused = 0;
  /** EMA of decode-only step time (ms). */
  private decodeStepMs: number | null = null;
  /** EMA of ms per prefill row-layer in steps that ran prefill rows. */
  private msPerRowLayer: number | null = null;

  constructor(
    readonly policy: SchedulerPolicy,
    /** Called when a work becomes runnable (prepared, loaded) so that an idle loop wakes. */
    private readonly wake: () => void,
  ) {}

  get idle(): boolean {
    return this.preparing.size === 0 && this.waiting.length === 0 && this.loading.size === 0 && this.active.length === 0;
  }

  /** Takes new work: runs its prepare, then queues it for admission. */
  submit(work: Work): void {
    this.preparing.add(work);
    work.prepare().then(
      () => {
        this.preparing.delete(work);
        if (work.finished) return;
        if (work.kvBytes > this.policy.kvBudgetBytes) {
          this.refused++;
          work.fail(
            new InputError(
              `this request needs ${work.kvBytes} bytes of KV memory and the engine's budget is ${this.policy.kvBudgetBytes} (CSA2_KV_BUDGET_BYTES); shorten it or raise the budget`,
            ),
          );
          return;
        }
        insertByPriority(this.waiting, work);
        // admitted (and its load started) now, while a step may be running, rather than at the next
        // plan: its loading then overlaps that step, and the work is active by the plan after it
        this.admit();
        this.wake();
      },
      (err: unknown) => {
        this.preparing.delete(work);
        work.fail(err);
      },
    );
  }

  /** Admits waiting work that fits (priority, then age), starting its load. */
  private admit(): void {
    while (this.waiting.length > 0) {
      const w = this.waiting[0] as Work;
      if (w.cancelled) {
        this.waiting.shift();
        w.cancel();
        continue;
      }
      if (this.kvInUse + w.kvBytes > this.policy.kvBudgetBytes) break;
      // the decode batch: sequences (choices) of admitted generations; one alone is always admitted
      const admitted = this.admittedSequences();
      if (w.kind === 'generate' && admitted > 0 && admitted + w.sequences > this.policy.maxRunning) break;
      this.waiting.shift();
      this.kvInUse += w.kvBytes;
      this.loading.add(w);
      w.load().then(
        () => {
          this.loading.delete(w);
          if (w.finished) this.release(w);
          else this.active.push(w);
          this.wake();
        },
        (err: unknown) => {
          this.loading.delete(w);
          w.fail(err);
          this.release(w);
          this.wake();
        },
      );
    }
  }

  private admittedSequences(): number {
    let n = 0;
    for (const w of this.active) if (w.kind === 'generate') n += w.sequences;
    for (const w of this.loading) if (w.kind === 'generate') n += w.sequences;
    return n;
  }

  private release(w: Work): void {
    this.kvInUse -= w.kvBytes;
  }

  /** Drops finished and cancelled work, admits what fits, and plans the next step. */
  plan(): StepPlan {
    this.retire();
    this.admit();
    const spans: Span[] = [];
    const works: Work[] = [];
    let budget = this.policy.maxStepTokens;
    let decodeRows = 0;
    // 1. every decoding sequence (each choice of a generation) gets its row
    for (const w of this.active) {
      if (decodeRows >= this.policy.maxRunning || budget === 0) break;
      const want = w.next();
      if (want?.kind !== 'decode') continue;
      const k = Math.min(want.rows, this.policy.maxRunning - decodeRows, budget);
      for (let j = 0; j < k; j++) {
        spans.push(w.span(1));
        works.push(w);
      }
      decodeRows += k;
      budget -= k;
    }
    // 2. prefill rows: one tenant a step, the one with the least prefill time; its best (priority, age) work first
    let prefillRows = 0;
    let prefillRowLayers = 0;
    let prefillTenant: string | null = null;
    const prefill = this.active.filter((w) => w.next()?.kind === 'prefill');
    // time-fair across tenants: the step's prefill rows go to the tenant with the least prefill time
    // (a tie: the one whose last turn is oldest); a tenant that comes back is placed by placeReturning
    const tenants = [...new Set(prefill.map((w) => w.tenant))].sort();
    this.placeReturning(tenants);
    if (prefill.length > 0 && budget > 0) {
      let rowLayerBudget = Infinity;
      if (decodeRows > 0) {
        const f = this.policy.decodeLatencyFactor;
        rowLayerBudget = this.decodeStepMs !== null && this.msPerRowLayer !== null ? ((f - 1) * this.decodeStepMs) / this.msPerRowLayer : 0;
      }
      const turn = (t: string) => this.lastTurn.get(t) ?? -1;
      const ms = (t: string) => this.prefillMs.get(t) as number;
      prefillTenant = tenants.reduce((a, b) => (ms(b) < ms(a) || (ms(b) === ms(a) && turn(b) < turn(a)) ? b : a));
      this.lastTurn.set(prefillTenant, this.plans);
      const order = [prefillTenant];
      // while other tenants wait, a step runs one span of this tenant's rows: shorter turns, so a waiting
      // tenant's share of time comes in finer slices (its wait behind one turn is one span's time)
      if (tenants.length > 1) budget = Math.min(budget, this.policy.prefillChunkTokens);
      const queues = new Map(order.map((t) => [t, prefill.filter((w) => w.tenant === t).sort(byPriorityThenAge)]));
      let progressed = true;
      while (budget > 0 && progressed) {
        progressed = false;
        for (const t of order) {
          const w = (queues.get(t) as Work[]).shift();
          if (w === undefined) continue;
          const want = w.next();
          if (want === null || want.kind !== 'prefill') continue;
          let rows = Math.min(budget, this.policy.prefillChunkTokens, want.rows);
          if (decodeRows > 0) {
            const byCost = Math.floor(rowLayerBudget / want.layers);
            // every prefilling work progresses by at least the floor (prompts arriving together start
            // together, not one after another behind the first one's floor)
            const floor = Math.min(this.policy.minPrefillTokens, want.rows);
            rows = Math.min(rows, Math.max(byCost, floor));
          }
          if (rows <= 0) continue;
          const span = w.span(rows);
          // a segment on the encoder graph's grid takes its whole cell, which may be more than offered
          const took = span.p1 - span.p0;
          spans.push(span);
          works.push(w);
          budget -= took;
          prefillRows += took;
          prefillRowLayers += took * want.layers;
          rowLayerBudget -= took * want.layers;
          progressed = true;
          if (budget <= 0) break;
        }
      }
    }
    this.plans++;
    return { spans, works, decodeRows, prefillRows, prefillRowLayers, prefillTenant: prefillRows > 0 ? prefillTenant : null };
  }

  /**
   * Places the tenants with prefill work that had none at the last plan (arrived, or back from idle):
   * at most `prefillIdleCreditMs` behind the least prefill time of the others, and never before where
   * they left off (`max(kept, clock - credit)`, as Linux's CFS places a waking task). So a tenant back
   * from idle runs first, alone, for up to the credit — at most the prefill time the others had while it
   * was idle — and then shares; a tenant that never idles gets no credit, and over any stretch in which
   * both have work one tenant's prefill time exceeds another's by at most the credit plus one step.
   */
  private placeReturning(tenants: readonly string[]): void {
    const continuing = tenants.filter((t) => this.prefillTenants.has(t));
    if (continuing.length > 0) this.prefillClockMs = Math.max(this.prefillClockMs, Math.min(...continuing.map((t) => this.prefillMs.get(t) as number)));
    const earliest = this.prefillClockMs - this.policy.prefillIdleCreditMs;
    for (const t of tenants) if (!this.prefillTenants.has(t)) this.prefillMs.set(t, Math.max(this.prefillMs.get(t) ?? -Infinity, earliest));
    this.prefillTenants = new Set(tenants);
    // an idle tenant whose time is that far behind would be placed at `earliest` anyway: forgotten
    for (const [t, v] of this.prefillMs) {
      if (this.prefillTenants.has(t) || v > earliest) continue;
      this.prefillMs.delete(t);
      this.lastTurn.delete(t);
    }
  }

  /** Hands each work its span's output and updates the cost model and the counters. */
  complete(plan: StepPlan, outs: readonly SpanOutput[], ms: number): void {
    plan.works.forEach((w, i) => {
      if (w.finished) return;
      try {
        w.took(plan.spans[i] as Span, outs[i] as SpanOutput);
      } catch (err) {
        w.fail(err);
      }
    });
    this.steps++;
    this.decodeTokens += plan.decodeRows;
    this.prefillTokens += plan.prefillRows;
    this.stepMs.observe(ms);
    this.batchRows.observe(plan.decodeRows + plan.prefillRows);
    if (plan.decodeRows > 0) this.decodeBatch.observe(plan.decodeRows);
    const ema = (old: number | null, v: number) => (old === null ? v : 0.8 * old + 0.2 * v);
    if (plan.prefillRows === 0 && plan.decodeRows > 0) this.decodeStepMs = ema(this.decodeStepMs, ms);
    else if (plan.prefillRowLayers > 0) {
      const decodePart = plan.decodeRows > 0 ? (this.decodeStepMs ?? 0) : 0;
      this.msPerRowLayer = ema(this.msPerRowLayer, Math.max(0, ms - decodePart) / plan.prefillRowLayers);
      if (plan.prefillTenant !== null) this.prefillMs.set(plan.prefillTenant, (this.prefillMs.get(plan.prefillTenant) ?? 0) + Math.max(0, ms - decodePart));
    }
    this.retire();
  }

  /** Fails every work of a step whose forward call threw (their sequences are in an unknown state). */
  failStep(plan: StepPlan, err: unknown): void {
    for (const w of plan.works) w.fail(err);
    this.retire();
  }

  private retire(): void {
    for (let i = this.active.length - 1; i >= 0; i--) {
      const w = this.active[i] as Work;
      if (!w.finished && w.cancelled) w.cancel();
      if (w.finished) {
        this.active.splice(i, 1);
        this.release(w);
      }
    }
    for (let i = this.waiting.length - 1; i >= 0; i--) {
      const w = this.waiting[i] as Work;
      if (w.cancelled && !w.finished) w.cancel();
      if (w.finished) this.waiting.splice(i, 1);
    }
  }

  /** Ends all work (the engine is closing). */
  failAll(err: unknown): void {
    for (const w of [...this.preparing, ...this.waiting, ...this.loading, ...this.active]) w.fail(err);
    this.waiting.length = 0;
    this.active.length = 0;
  }

  stats(): SchedulerStats {
    return {
      running: this.active.length + this.loading.size,
      waiting: this.waiting.length + this.preparing.size,
      kvBytesInUse: this.kvInUse,
      kvBudgetBytes: this.policy.kvBudgetBytes,
      steps: this.steps,
      decodeTokens: this.decodeTokens,
      prefillTokens: this.prefillTokens,
      refused: this.refused,
      stepMs: this.stepMs.snapshot(),
      batchRows: this.batchRows.snapshot(),
      decodeBatch: this.decodeBatch.snapshot(),
    };
  }
}

function byPriorityThenAge(a: Work, b: Work): number {
  return a.priority - b.priority || a.submittedAtMs - b.submittedAtMs || a.id - b.id;
}

function insertByPriority(queue: Work[], w: Work): void {
  let i = queue.length;
  while (i > 0 && byPriorityThenAge(queue[i - 1] as Work, w) > 0) i--;
  queue.splice(i, 0, w);
}
