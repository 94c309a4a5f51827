/**
 * @module model/sequence/row-arena
 * Memory for loaded documents' packed rows that stays with the process: one SharedArrayBuffer of a
 * fixed capacity (mapped when first used, its pages faulted in as they are first written), handed out
 * as 64-byte-aligned regions (first fit) and taken back when a document leaves the engine's document
 * cache, so that the next document is written into pages the process already holds.
 *
 * Why: a document loaded into new memory pays a page fault per 4 KiB page, and on a VM that cost
 * dominates the load (this project's 2-core Firecracker VM: ~13 µs a fault, a new 143 MB array filled
 * at 274–331 MB/s against ~16 GB/s into pages already present: bench/tools/first-touch.mjs). Freed
 * document buffers go back to the system (multi-MB allocations are their own mappings,
 * WORKER_MALLOC_ENV), so without an arena every document a decoder loads faults all its pages in
 * again. The arena keeps what documents have used (at most its capacity, the document cache's bytes)
 * resident, as a serving engine keeps its KV memory.
 *
 * A region is zeroed when it is handed out again (pages already present: a memset, no faults), so a
 * store's bytes past its rows read as a fresh allocation's. Requests below MIN_REGION_BYTES, and those
 * that no free run fits, get null: the caller allocates as before.
 */
import { Csa2Error } from '../../errors.js';

/** Regions start on this boundary (cache lines). */
const ALIGN = 64;
/** The smallest page: prefault writes a byte in each. */
const PAGE = 4096;
/** Smaller requests are not worth a region: they go to the allocator as before. */
export const MIN_REGION_BYTES = 1024;

export interface RowArenaStats {
  readonly capacityBytes: number;
  /** Bytes in regions handed out now. */
  readonly usedBytes: number;
  /** The highest offset ever handed out: at most this much of the arena is resident. */
  readonly touchedBytes: number;
  readonly regions: number;
  /** Requests served by a region, and requests of at least MIN_REGION_BYTES that no free run fitted (they got null; smaller ones are not counted). */
  readonly taken: number;
  readonly declined: number;
}

export class RowArena {
  private buffer: SharedArrayBuffer | null = null;
  /** Free runs [offset, end), sorted by offset, never adjacent (joined on release). */
  private free: Array<[number, number]>;
  /** Regions handed out: offset → length (aligned). */
  private readonly regions = new Map<number, number>();
  private used = 0;
  private touched = 0;
  private taken = 0;
  private declined = 0;

  constructor(readonly capacityBytes: number) {
    if (!Number.isSafeInteger(capacityBytes) || capacityBytes < 0)
      throw new Csa2Error('config-invalid', `row arena capacity must be a non-negative integer, got ${capacityBytes}`);
    this.capacityBytes = Math.floor(capacityBytes / ALIGN) * ALIGN;
    this.free = this.capacityBytes > 0 ? [[0, this.capacityBytes]] : [];
  }

  get stats(): RowArenaStats {
    return {
      capacityBytes: this.capacityBytes,
      usedBytes: this.used,
      touchedBytes: this.touched,
      regions: this.regions.size,
      taken: this.taken,
      declined: this.declined,
    };
  }

  /** Whether `view` is a region this arena handed out (and has not taken back). */
  owns(view: Uint8Array): boolean {
    return this.buffer !== null && view.buffer === this.buffer && this.regions.get(view.byteOffset) === alignUp(view.byteLength);
  }

  /** A zeroed region of `bytes` bytes (a view of the arena's SharedArrayBuffer), or null (see the module comment). */
  take(bytes: number): Uint8Array | null {
    if (!Number.isSafeInteger(bytes) || bytes < 0) throw new Csa2Error('runtime', `RowArena.take: ${bytes} bytes`);
    const need = alignUp(bytes);
    if (bytes < MIN_REGION_BYTES) return null;
    const at = this.free.findIndex(([a, b]) => b - a >= need);
    if (at < 0) {
      this.declined++;
      return null;
    }
    const run = this.free[at] as [number, number];
    const offset = run[0];
    if (run[1] - offset === need) this.free.splice(at, 1);
    else run[0] = offset + need;
    this.buffer ??= new SharedArrayBuffer(this.capacityBytes);
    this.regions.set(offset, need);
    this.used += need;
    this.taken++;
    const view = new Uint8Array(this.buffer, offset, bytes);
    // what an earlier region wrote (pages present); above the high-water mark the pages are still zero
    if (offset < this.touched) view.fill(0, 0, Math.min(bytes, this.touched - offset));
    this.touched = Math.max(this.touched, offset + need);
    return view;
  }

  /**
   * Takes back a region this arena handed out (true); false for any other view (an ordinary
   * allocation: left to the collector). The region's bytes are handed out again by later takes: the
   * caller must not read `view` afterwards.
   */
  give(view: Uint8Array): boolean {
    if (!this.owns(view)) return false;
    const offset = view.byteOffset;
    const length = this.regions.get(offset) as number;
    this.regions.delete(offset);
    this.used -= length;
    let end = offset + length;
    let start = offset;
    // insert in offset order, joining the free runs on either side
    let i = 0;
    while (i < this.free.length && (this.free[i] as [number, number])[0] < start) i++;
    const before = this.free[i - 1];
    const after = this.free[i];
    if (after !== undefined && after[0] === end) {
      end = after[1];
      this.free.splice(i, 1);
    }
    if (before !== undefined && before[1] === start) {
      start = before[0];
      before[1] = end;
    } else this.free.splice(i, 0, [start, end]);
    return true;
  }

  /**
   * Faults in the first `bytes` of the arena (at most its capacity) now, a write a page, so that the
   * documents loaded into them later find their pages present (a serving engine that takes its KV
   * memory at start). Returns the milliseconds it took. The pages stay resident.
   */
  prefault(bytes = this.capacityBytes): number {
    if (!Number.isSafeInteger(bytes) || bytes < 0)
      throw new Csa2Error('config-invalid', `row arena prefault bytes must be a non-negative integer, got ${bytes}`);
    const end = Math.min(this.capacityBytes, bytes);
    if (end === 0) return 0;
    const t0 = performance.now();
    this.buffer ??= new SharedArrayBuffer(this.capacityBytes);
    const all = new Uint8Array(this.buffer, 0, end);
    // a write a page (4 KiB, or larger: a write lands in each); what regions hold now is left as it is
    for (let o = this.touched; o < end; o += PAGE) all[o] = 0;
    this.touched = Math.max(this.touched, Math.ceil(end / ALIGN) * ALIGN);
    return performance.now() - t0;
  }

  /** The free runs (offset, end), in order: for tests. */
  freeRuns(): ReadonlyArray<readonly [number, number]> {
    return this.free.map(([a, b]) => [a, b] as const);
  }
}

function alignUp(bytes: number): number {
  return Math.ceil(bytes / ALIGN) * ALIGN;
}
