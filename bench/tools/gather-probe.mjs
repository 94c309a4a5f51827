#!/usr/bin/env node
/**
 * What gathering a candidate pool's index keys costs: 2,048 random blocks of 8 rows of 17 bytes (the bench's
 * tiny width; ROW_BYTES to change it) from a store of 1,048,576 rows, copied block by block (Buffer.copy, as
 * PackedRowStore.gatherBlocks did before its touch pass), and by PackedRowStore.gatherBlocks; 64 different
 * block lists in turn, so that the blocks come from memory, not cache. A diagnostic.
 *
 *   npm run build && node bench/tools/gather-probe.mjs [ROW_BYTES]
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
  for (const [name, f] of [['Buffer.copy a block at a time', plain], ['PackedRowStore.gatherBlocks (touch pass, then copies)', viaStore]]) {
    for (let w = 0; w < 64; w++) f(sets[w]);
    const t0 = performance.now();
    for (let w = 0; w < 640; w++) f(sets[w % 64]);
    const ms = performance.now() - t0;
    console.log(`${name}: ${((ms / 640) * 1000).toFixed(0)} µs per pool of 2,048 blocks of ${W} bytes (${((ms * 1e6) / 640 / 2048).toFixed(0)} ns a block)`);
  }
}
