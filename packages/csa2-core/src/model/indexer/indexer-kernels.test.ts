/**
 * MainKvUnpacker (WebAssembly) = graphs/packed-ops unpackMainKv, bit for bit, for every payload byte
 * under every E4M3 scale byte (0x00, subnormal scales, 0x7f/0xff NaN → 0 as in the graph's table, -0
 * values), at head dims 64 and 512, and with its memory reused and grown between calls. (The index
 * keys' unpack has the same test in indexer-scores.test.)
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GraphBuilder } from '../../onnx/graph-builder.js';
import { openGraphSession, u8 } from '../../runtime/ort-session.js';
import { unpackMainKv } from '../graphs/packed-ops.js';
import { MainKvUnpacker } from './indexer-kernels.js';

test('MainKvUnpacker gives the graph unpack of packed main-KV rows bit for bit (every payload and scale byte)', async () => {
  for (const D of [64, 512]) {
    const rowBytes = D / 2 + D / 16;
    const blocks = D / 16;
    // 256 scale bytes × 256 payload bytes, each pair somewhere: row i's block b has scale (i·blocks + b) % 256
    // and payload bytes (i + 7j + 31b) % 256
    const rows = Math.ceil((256 * 256) / (8 * blocks)) + 256;
    const packed = new Uint8Array(rows * rowBytes);
    for (let i = 0; i < rows; i++) {
      for (let b = 0; b < blocks; b++) {
        packed[i * rowBytes + D / 2 + b] = (i * blocks + b) & 0xff;
        for (let j = 0; j < 8; j++) packed[i * rowBytes + b * 8 + j] = (i + 7 * j + 31 * b + Math.floor(i / 256) * 8) & 0xff;
      }
    }
    const g = new GraphBuilder('unpack');
    g.output(unpackMainKv(g, g.input('P', 'uint8', ['N', rowBytes]), D), 'v', 'float32', ['N', D]);
    const session = await openGraphSession('unpack', g.toBytes());
    const want = (await session.run({ P: u8(packed, [rows, rowBytes]) }))['v']?.data as Float32Array;
    await session.dispose();
    const unpacker = new MainKvUnpacker(D);
    unpacker.unpack(packed.subarray(0, 2 * rowBytes), 2); // memory reused, then grown
    const got = unpacker.unpack(packed, rows).slice();
    const a = new Uint32Array(want.buffer, want.byteOffset, want.length);
    const b = new Uint32Array(got.buffer, got.byteOffset, got.length);
    assert.equal(b.length, a.length);
    let differ = 0;
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) differ++;
    assert.equal(differ, 0, `D = ${D}: bits differ at ${differ} of ${a.length} values`);
    // the pairs covered: every (scale byte, payload byte)
    const seen = new Set<number>();
    for (let i = 0; i < rows; i++)
      for (let bl = 0; bl < blocks; bl++)
        for (let j = 0; j < 8; j++) seen.add((packed[i * rowBytes + D / 2 + bl] as number) * 256 + (packed[i * rowBytes + bl * 8 + j] as number));
    assert.equal(seen.size, 65536, `D = ${D}: every scale × payload byte pair is unpacked`);
  }
});

test('MainKvUnpacker refuses a head dim that is not a multiple of 16 and rows it was not given', () => {
  assert.throws(() => new MainKvUnpacker(40), /head dim 40/);
  assert.throws(() => new MainKvUnpacker(64).unpack(new Uint8Array(10), 1), /1 rows of 36 bytes from 10/);
});
