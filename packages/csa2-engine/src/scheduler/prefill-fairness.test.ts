/**
 * The scheduler's prefill fairness across tenants, on stand-in works with a simulated clock (each
 * step "takes" what its rows cost): a step's prefill rows are one tenant's, the one with the least
 * prefill time; a tenant back from idle runs first for up to its idle credit (no more than the others
 * had while it was idle) and then shares; a work is admitted, and its load started, as soon as it is
 * prepared.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Span, SpanOutput } from '@csa2/core';
import { Scheduler } from './scheduler.js';
import { resolvePolicy, type SchedulerPolicy } from './scheduler-policy.js';
import type { NextRows, Work } from './work.js';

let nextId = 0;

/** A prefill-only work: `rows` rows through `layers` layers, each row costing `msPerRow` of a step. */
class StandIn implements Work {
  readonly kind = 'ingest';
  readonly id = nextId++;
  readonly submittedAtMs = this.id;
  readonly sequences = 1;
  readonly kvBytes = 1;
  readonly cancelled = false;
  finished = false;
  loadStarted = false;
  private done = 0;

  constructor(
    readonly tenant: string,
    readonly rows: number,
    readonly msPerRow: number,
    readonly layers = 20,
    readonly priority = 1,
  ) {}

  async prepare(): Promise<void> {}
  async load(): Promise<void> {
    this.loadStarted = true;
  }
  next(): NextRows {
    return this.finished ? null : { kind: 'prefill', rows: this.rows - this.done, layers: this.layers };
  }
  /** Only the rows of a span matter to the scheduler. */
  span(rows: number): Span {
    return { p0: this.done, p1: Math.min(this.rows, this.done + rows) } as Span;
  }
  took(span: Span): void {
    this.done = span.p1;
    if (this.done >= this.rows) this.finished = true;
  }
  fail(): void {
    this.finished = true;
  }
  cancel(): void {
    this.finished = true;
  }
}

/** Lets the works' prepare and load promises settle. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

interface Turn {
  readonly tenant: string | null;
  readonly ms: number;
  readonly spans: number;
}

/** Plans and completes one step; its time is the sum of its spans' rows × their works' cost. */
function step(s: Scheduler): Turn {
  const plan = s.plan();
  let ms = 0;
  plan.spans.forEach((span, i) => (ms += (span.p1 - span.p0) * (plan.works[i] as StandIn).msPerRow));
  s.complete(
    plan,
    plan.spans.map(() => ({}) as SpanOutput),
    ms,
  );
  return { tenant: plan.prefillTenant, ms, spans: plan.spans.length };
}

function scheduler(policy: Partial<SchedulerPolicy>): Scheduler {
  return new Scheduler(resolvePolicy(policy), () => undefined);
}

test('a tenant that arrives while another floods the steps runs alone for its idle credit, then shares time step by step', async () => {
  const s = scheduler({ prefillChunkTokens: 100, prefillIdleCreditMs: 1000 });
  // tenant "a": two long documents, 3 ms a row (rows deep in a document cost more)
  for (let i = 0; i < 2; i++) s.submit(new StandIn('a', 100_000, 3));
  await settle();
  for (let i = 0; i < 20; i++) assert.equal(step(s).tenant, 'a');
  // tenant "b": one request of 3,000 rows at 2 ms a row (6 s of steps)
  const b = new StandIn('b', 3000, 2);
  s.submit(b);
  await settle();
  const turns: Turn[] = [];
  while (!b.finished && turns.length < 1000) turns.push(step(s));
  // the credit: b's first 1,000 ms (five 200-ms steps of its rows) run before any of a's
  const firstA = turns.findIndex((t) => t.tenant === 'a');
  assert.equal(firstA, 5, `b's steps before a's first: ${firstA}`);
  // then time-fair: over the rest, each tenant's time within one step of the other's
  const after = turns.slice(firstA);
  const total = (who: string) => after.filter((t) => t.tenant === who).reduce((x, t) => x + t.ms, 0);
  assert.ok(Math.abs(total('a') - total('b')) <= 300, `a ${total('a')} ms, b ${total('b')} ms after b's credit`);
  // b's 6 s of rows took 6 s + 5 s of a's (not 12 s)
  const elapsed = turns.reduce((x, t) => x + t.ms, 0);
  assert.ok(elapsed <= 11_300, `b's request took ${elapsed} ms of steps`);
});

test('without idle credit a tenant that arrives starts level with the others, and has the first turn of the tie', async () => {
  const s = scheduler({ prefillChunkTokens: 100, prefillIdleCreditMs: 0 });
  s.submit(new StandIn('a', 100_000, 3));
  await settle();
  for (let i = 0; i < 10; i++) step(s);
  // "b" sorts after "a" but "a" had the last turn: the tie is b's
  const b = new StandIn('b', 1000, 3);
  s.submit(b);
  await settle();
  const turns: (string | null)[] = [];
  while (!b.finished && turns.length < 1000) turns.push(step(s).tenant);
  assert.deepEqual(turns.slice(0, 6), ['b', 'a', 'b', 'a', 'b', 'a']);
});

test('the idle credit is at most the time the others had while the tenant was idle: back-to-back requests share time', async () => {
  const s = scheduler({ prefillChunkTokens: 100, prefillIdleCreditMs: 5000 });
  s.submit(new StandIn('a', 1_000_000, 3));
  await settle();
  for (let i = 0; i < 50; i++) step(s);
  // "b" sends 1-step requests one after another: each arrives one step (of a's) after the last ended
  const spent = new Map<string, number>([
    ['a', 0],
    ['b', 0],
  ]);
  let b: StandIn | null = null;
  for (let i = 0; i < 400; i++) {
    if (b === null || b.finished) {
      b = new StandIn('b', 100, 3);
      s.submit(b);
      await settle();
    }
    const t = step(s);
    spent.set(t.tenant as string, (spent.get(t.tenant as string) as number) + t.ms);
  }
  // b's first request had the whole credit; after that, nothing is owed to it: a never starves
  const [ta, tb] = [spent.get('a') as number, spent.get('b') as number];
  assert.ok(tb - ta <= 5000 + 300, `b ${tb} ms, a ${ta} ms`);
  assert.ok(ta >= 0.45 * (ta + tb), `a had ${ta} of ${ta + tb} ms`);
});

test('a work is admitted and its load started when it is prepared, before the next plan', async () => {
  const s = scheduler({});
  const running = new StandIn('a', 10_000, 3);
  s.submit(running);
  await settle();
  const plan = s.plan(); // a step runs
  const arriving = new StandIn('b', 500, 2);
  s.submit(arriving);
  await settle();
  assert.ok(arriving.loadStarted, 'its load started while the step ran');
  s.complete(
    plan,
    plan.spans.map(() => ({}) as SpanOutput),
    500,
  );
  assert.equal(step(s).tenant, 'b', 'the next step is its');
});
