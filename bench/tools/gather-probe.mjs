#!/usr/bin/env node
/**
 * What gathering a candidate pool's index keys costs: 2,048 random blocks of 8 rows of 17 bytes (the bench's
 * tiny width; ROW_BYTES to change it) from a store of 1,048,576 rows, copied block by block (Buffer.copy, as
 * PackedRowStore.gatherBlocks did before its touch pass), and by PackedRowStore.gatherBlocks; 64 different
 * block lists in turn, so that the blocks come from memory, not cache; then an attention's 512 selected rows of a 1M-row
 * main-KV store (36 bytes; MAIN_BYTES), by Buffer.copy and by PackedRowStore.gather. A diagnostic.
 *
 *   npm run build && node bench/tools/gather-probe.mjs [ROW_BYTES] [MAIN_BYTES]
 */
import { PackedRowStore } from '@csa2/core';

const R = Number(process.argv[2] ?? 17);
const BR = 8;
const rows = 1 << 20;
const NB = rows / BR;
const W = BR * R;
const store = new PackedRowStore(R, rows);
const chunk = new Uint8Array(4096 * R).map((_, i) => (i * 31) & 255);
for (let r = 0; r < rows; r += 4096) store.append(chunk);
let seed = 7;
const next = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0);
const sets = Array.from({ length: 64 }, () => Int32Array.from({ length: 2048 }, () => next() % NB).sort());
const out = new Uint8Array(2048 * W);
const src = Buffer.from(store.view().buffer, store.view().byteOffset, store.view().byteLength);
const dst = Buffer.from(out.buffer);
const plain = (blocks) => {
  let o = 0;
  for (let i = 0; i < blocks.length; i++) {
    const a = blocks[i] * W;
    src.copy(dst, o, a, a + W);
    o += W;
  }
};
const viaStore = (blocks) => store.gatherBlocks(blocks, BR, rows, out);
const check = new Uint8Array(out.length);
plain(sets[0]);
check.set(out);
viaStore(sets[0]);
if (Buffer.compare(Buffer.from(check), Buffer.from(out)) !== 0) throw new Error('gatherBlocks copied other bytes than the plain copy');
for (let round = 0; round < 2; round++) {
  for (const [name, f] of [
    ['Buffer.copy a block at a time', plain],
    ['PackedRowStore.gatherBlocks (touch pass, then copies)', viaStore],
  ]) {
    for (let w = 0; w < 64; w++) f(sets[w]);
    const t0 = performance.now();
    for (let w = 0; w < 640; w++) f(sets[w % 64]);
    const ms = performance.now() - t0;
    console.log(`${name}: ${((ms / 640) * 1000).toFixed(0)} µs per pool of 2,048 blocks of ${W} bytes (${((ms * 1e6) / 640 / 2048).toFixed(0)} ns a block)`);
  }
}

// an attention's selected entries: 512 random rows of a 1M-row main-KV store (36 bytes at the tiny width; MAIN_BYTES to change it)
{
  const MR = Number(process.argv[3] ?? 36);
  const main = new PackedRowStore(MR, rows);
  const c2 = new Uint8Array(4096 * MR).map((_, i) => (i * 13) & 255);
  for (let r = 0; r < rows; r += 4096) main.append(c2);
  const picks = Array.from({ length: 64 }, () => Int32Array.from({ length: 512 }, () => next() % rows).sort());
  const o2 = new Uint8Array(512 * MR);
  const s2 = Buffer.from(main.view().buffer, main.view().byteOffset, main.view().byteLength);
  const d2 = Buffer.from(o2.buffer);
  const plainRows = (ix) => {
    for (let i = 0; i < ix.length; i++) s2.copy(d2, i * MR, ix[i] * MR, ix[i] * MR + MR);
  };
  for (let round = 0; round < 2; round++) {
    for (const [name, f] of [
      ['Buffer.copy a row at a time', plainRows],
      ['PackedRowStore.gather (touch pass, then copies)', (ix) => main.gather(ix, o2)],
    ]) {
      for (let w = 0; w < 64; w++) f(picks[w]);
      const t0 = performance.now();
      for (let w = 0; w < 640; w++) f(picks[w % 64]);
      const ms = performance.now() - t0;
      console.log(`${name}: ${((ms / 640) * 1000).toFixed(0)} µs per 512 selected rows of ${MR} bytes (${((ms * 1e6) / 640 / 512).toFixed(0)} ns a row)`);
    }
  }
}
