import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointError } from '../errors.js';
import { SafetensorsWriter, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, openSafetensors, writeSafetensors } from './safetensors.js';
import type { TensorEntry } from './safetensors.js';
import { fixturesRoot } from '../testing/fixtures.js';

const TINY_A = join(fixturesRoot(), 'deepseek-v41-tiny-a');

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'csa2-st-'));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function f32Bits(x: number): number {
  return new Uint32Array(new Float32Array([x]).buffer)[0] as number;
}

function bf16ToF32(bits: number): number {
  return new Float32Array(new Uint32Array([bits << 16]).buffer)[0] as number;
}

test('bf16 rounding is round-to-nearest-even and keeps NaN / inf', () => {
  assert.equal(f32ToBf16Bits(f32Bits(1)), 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1)
  assert.equal(bf16ToF32(f32ToBf16Bits(f32Bits(1 + 2 ** -8))), 1);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): ties to even
  assert.equal(bf16ToF32(f32ToBf16Bits(f32Bits(1 + 3 * 2 ** -8))), 1 + 2 ** -6);
  // just above halfway rounds up
  assert.equal(bf16ToF32(f32ToBf16Bits(f32Bits(1 + 2 ** -8 + 2 ** -20))), 1 + 2 ** -7);
  assert.equal(bf16ToF32(f32ToBf16Bits(f32Bits(-2.5))), -2.5);
  assert.ok(Number.isNaN(bf16ToF32(f32ToBf16Bits(f32Bits(NaN)))));
  assert.ok(Number.isNaN(bf16ToF32(f32ToBf16Bits(0x7f800001)))); // a NaN whose payload would round to inf
  assert.equal(bf16ToF32(f32ToBf16Bits(f32Bits(Infinity))), Infinity);
  assert.equal(bf16ToF32(f32ToBf16Bits(f32Bits(-Infinity))), -Infinity);
  assert.equal(bf16ToF32(f32ToBf16Bits(f32Bits(3.4028234663852886e38))), Infinity); // max f32 rounds up to inf
  assert.equal(f32ToBf16Bits(f32Bits(-0)), 0x8000);
});

test('f16 conversion: exact decode and round-to-nearest-even encode, subnormals included', () => {
  for (let h = 0; h < 0x10000; h++) {
    const v = f16BitsToF32(h);
    if (Number.isNaN(v)) {
      assert.ok(Number.isNaN(f16BitsToF32(f32ToF16Bits(f32Bits(v)))));
      continue;
    }
    assert.equal(f32ToF16Bits(f32Bits(v)), h, `f16 0x${h.toString(16)} = ${v} should round-trip`);
  }
  assert.equal(f16BitsToF32(0x3c00), 1);
  assert.equal(f16BitsToF32(0x7bff), 65504);
  assert.equal(f16BitsToF32(0x0001), 2 ** -24);
  assert.equal(f32ToF16Bits(f32Bits(65520)), 0x7c00); // halfway above max: ties to even = inf
  assert.equal(f32ToF16Bits(f32Bits(65519)), 0x7bff);
  assert.equal(f32ToF16Bits(f32Bits(1 + 2 ** -11)), 0x3c00); // tie to even
  assert.equal(f32ToF16Bits(f32Bits(1 + 3 * 2 ** -11)), 0x3c02);
  assert.equal(f32ToF16Bits(f32Bits(2 ** -25)), 0x0000); // tie between 0 and the smallest subnormal
  assert.equal(f32ToF16Bits(f32Bits(3 * 2 ** -25)), 0x0002);
  assert.equal(f32ToF16Bits(f32Bits(2 ** -26)), 0x0000);
  assert.equal(f32ToF16Bits(f32Bits(-(2 ** -14 - 2 ** -25))), 0x8400); // rounds up into the smallest normal
});

test('round trip of every dtype, with metadata', async () => {
  await withTempDir(async (dir) => {
    const path = join(dir, 'all.safetensors');
    const f32 = new Float32Array([1.5, -2, 3.25, 1e-30, -0, 7]);
    const tensors: TensorEntry[] = [
      { name: 'f32', dtype: 'F32', shape: [2, 3], data: f32 },
      { name: 'bf16', dtype: 'BF16', shape: [3, 2], data: new Float32Array([1, -0.5, 3 + 2 ** -7, 1 + 2 ** -8, 256, NaN]) },
      { name: 'f16', dtype: 'F16', shape: [4], data: new Float32Array([1, 0.333251953125, -65504, 2 ** -24]) },
      { name: 'f64', dtype: 'F64', shape: [2], data: new Float64Array([Math.PI, -1e300]) },
      { name: 'i64', dtype: 'I64', shape: [3], data: new BigInt64Array([-(2n ** 62n), 0n, 123456789012345n]) },
      { name: 'u64', dtype: 'U64', shape: [1], data: new BigUint64Array([2n ** 64n - 1n]) },
      { name: 'i32', dtype: 'I32', shape: [2, 2], data: new Int32Array([-1, 2 ** 31 - 1, -(2 ** 31), 42]) },
      { name: 'u32', dtype: 'U32', shape: [1], data: new Uint32Array([4294967295]) },
      { name: 'i16', dtype: 'I16', shape: [2], data: new Int16Array([-32768, 32767]) },
      { name: 'u16', dtype: 'U16', shape: [2], data: new Uint16Array([0, 65535]) },
      { name: 'i8', dtype: 'I8', shape: [2], data: new Int8Array([-128, 127]) },
      { name: 'u8', dtype: 'U8', shape: [3], data: new Uint8Array([0, 128, 255]) },
      { name: 'bool', dtype: 'BOOL', shape: [2], data: new Uint8Array([1, 0]) },
      { name: 'e4m3', dtype: 'F8_E4M3', shape: [2], data: new Uint8Array([0x38, 0xb8]) },
      { name: 'e5m2', dtype: 'F8_E5M2', shape: [1], data: new Uint8Array([0x3c]) },
      { name: 'e8m0', dtype: 'F8_E8M0', shape: [1], data: new Uint8Array([127]) },
      { name: 'bf16_raw', dtype: 'BF16', shape: [2], data: new Uint16Array([0x3f80, 0xc000]) },
      { name: 'empty', dtype: 'F32', shape: [0, 4], data: new Float32Array(0) },
      { name: 'scalar', dtype: 'F32', shape: [], data: new Float32Array([9]) },
    ];
    await writeSafetensors(path, tensors, { format: 'pt', note: 'round trip' });
    const bytes = await readFile(path);
    const headerLen = Number(bytes.readBigUInt64LE(0));
    assert.equal(headerLen % 8, 0, 'the header is padded to 8 bytes');
    const file = openSafetensors(path);
    try {
      assert.deepEqual(file.metadata, { format: 'pt', note: 'round trip' });
      assert.deepEqual(
        [...file.tensors.keys()],
        tensors.map((t) => t.name),
      );
      assert.deepEqual(file.info('f32').shape, [2, 3]);
      assert.equal(file.info('f32').byteLength, 24);
      assert.equal(file.info('f32').byteOffset, 8 + headerLen);
      assert.deepEqual(file.readTensorF32('f32'), f32);
      const bf = file.readTensorF32('bf16');
      assert.deepEqual([...bf.slice(0, 5)], [1, -0.5, 3, 1, 256]); // 3 + 2^-7 and 1 + 2^-8 are ties to even
      assert.ok(Number.isNaN(bf[5]));
      assert.deepEqual([...file.readTensorF32('f16')], [1, 0.333251953125, -65504, 2 ** -24]);
      assert.deepEqual([...file.readTensorF32('bf16_raw')], [1, -2]);
      assert.deepEqual([...new Float64Array(file.readTensorRaw('f64').buffer)], [Math.PI, -1e300]);
      assert.deepEqual([...file.readTensorI64('i64')], [-(2n ** 62n), 0n, 123456789012345n]);
      assert.deepEqual([...new BigUint64Array(file.readTensorRaw('u64').buffer)], [2n ** 64n - 1n]);
      assert.deepEqual([...file.readTensorI32('i32')], [-1, 2 ** 31 - 1, -(2 ** 31), 42]);
      assert.deepEqual([...new Uint32Array(file.readTensorRaw('u32').buffer)], [4294967295]);
      assert.deepEqual([...new Int16Array(file.readTensorRaw('i16').buffer)], [-32768, 32767]);
      assert.deepEqual([...new Uint16Array(file.readTensorRaw('u16').buffer)], [0, 65535]);
      assert.deepEqual([...new Int8Array(file.readTensorRaw('i8').buffer)], [-128, 127]);
      assert.deepEqual([...file.readTensorU8('u8')], [0, 128, 255]);
      assert.deepEqual([...file.readTensorU8('bool')], [1, 0]);
      assert.deepEqual([...file.readTensorRaw('e4m3')], [0x38, 0xb8]);
      assert.deepEqual([...file.readTensorRaw('e5m2')], [0x3c]);
      assert.deepEqual([...file.readTensorRaw('e8m0')], [127]);
      assert.equal(file.readTensorF32('empty').length, 0);
      assert.deepEqual([...file.readTensorF32('scalar')], [9]);
      // typed readers refuse the wrong dtype, naming the tensor
      assert.throws(
        () => file.readTensorF32('i32'),
        (e: unknown) => e instanceof CheckpointError && e.tensor === 'i32' && /has dtype I32/.test(e.message),
      );
      assert.throws(
        () => file.readTensorI32('f32'),
        (e: unknown) => e instanceof CheckpointError && e.tensor === 'f32',
      );
      assert.throws(
        () => file.info('nope'),
        (e: unknown) => e instanceof CheckpointError && e.tensor === 'nope' && e.message.includes(path),
      );
    } finally {
      file.close();
    }
    assert.ok(!existsSync(`${path}.partial`));
  });
});

test('the streaming writer enforces the declared order, data sizes and completeness', async () => {
  await withTempDir(async (dir) => {
    const path = join(dir, 'stream.safetensors');
    const w = await SafetensorsWriter.create(path, [
      { name: 'a', dtype: 'BF16', shape: [2, 3] },
      { name: 'b', dtype: 'I32', shape: [2] },
    ]);
    assert.equal(w.dataBytes, 12 + 8);
    await assert.rejects(w.write('b', new Int32Array(2)), (e: unknown) => e instanceof CheckpointError && /expected "a" next/.test(e.message));
    await assert.rejects(w.write('a', new Float32Array(5)), (e: unknown) => e instanceof CheckpointError && /5 elements \(expected 6\)/.test(e.message));
    await assert.rejects(w.write('a', new Int32Array(6)), (e: unknown) => e instanceof CheckpointError && /from Int32Array/.test(e.message));
    await w.write('a', new Float32Array([1, 2, 3, 4, 5, 6]));
    assert.equal(w.nextSpec?.name, 'b');
    assert.ok(!existsSync(path), 'nothing under the final name before close');
    await assert.rejects(w.close(), (e: unknown) => e instanceof CheckpointError && e.tensor === 'b');
    assert.ok(!existsSync(path) && !existsSync(`${path}.partial`));

    const w2 = await SafetensorsWriter.create(path, [{ name: 'a', dtype: 'F32', shape: [1] }]);
    await w2.write('a', new Float32Array([5]));
    await w2.close();
    const f = openSafetensors(path);
    assert.deepEqual([...f.readTensorF32('a')], [5]);
    f.close();
    await assert.rejects(
      SafetensorsWriter.create(path, [
        { name: 'x', dtype: 'F32', shape: [1] },
        { name: 'x', dtype: 'F32', shape: [1] },
      ]),
      (e: unknown) => e instanceof CheckpointError && /listed twice/.test(e.message),
    );
  });
});

test('writeChunks streams one tensor in pieces and refuses a wrong total', async () => {
  await withTempDir(async (dir) => {
    const path = join(dir, 'chunks.safetensors');
    const w = await SafetensorsWriter.create(path, [
      { name: 'big', dtype: 'BF16', shape: [3, 4] },
      { name: 'ids', dtype: 'I32', shape: [5] },
    ]);
    await w.writeChunks('big', [new Float32Array([0, 1, 2, 3, 4]), new Float32Array([5, 6, 7, 8, 9, 10, 11])]);
    async function* ids(): AsyncGenerator<Int32Array> {
      yield new Int32Array([1, 2]);
      yield new Int32Array([3, 4, 5]);
    }
    await w.writeChunks('ids', ids());
    await w.close();
    const f = openSafetensors(path);
    try {
      assert.deepEqual([...f.readTensorF32('big')], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
      assert.deepEqual([...f.readTensorI32('ids')], [1, 2, 3, 4, 5]);
    } finally {
      f.close();
    }
    const short = await SafetensorsWriter.create(`${path}2`, [{ name: 'x', dtype: 'F32', shape: [4] }]);
    await assert.rejects(
      short.writeChunks('x', [new Float32Array(3)]),
      (e: unknown) => e instanceof CheckpointError && /hold 3 elements, expected 4/.test(e.message),
    );
    assert.ok(!existsSync(`${path}2`) && !existsSync(`${path}2.partial`), 'a failed stream leaves no file behind');
    const long = await SafetensorsWriter.create(`${path}3`, [{ name: 'x', dtype: 'F32', shape: [4] }]);
    await assert.rejects(
      long.writeChunks('x', [new Float32Array(3), new Float32Array(3)]),
      (e: unknown) => e instanceof CheckpointError && /exceed/.test(e.message),
    );
    await assert.rejects(long.write('x', new Float32Array(4)), (e: unknown) => e instanceof CheckpointError && /closed/.test(e.message));
  });
});

/** An independent parse of one I32 tensor, with Buffer reads only. */
async function manualReadI32(path: string, name: string): Promise<{ shape: number[]; values: number[] }> {
  const bytes = await readFile(path);
  const n = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const entry = header[name];
  assert.ok(entry !== undefined && entry.dtype === 'I32');
  const values: number[] = [];
  for (let o = entry.data_offsets[0]; o < entry.data_offsets[1]; o += 4) values.push(bytes.readInt32LE(8 + n + o));
  return { shape: entry.shape, values };
}

test('reads the tiny-a fixture model and golden files', async (t) => {
  const model = openSafetensors(`${TINY_A}/model.safetensors`);
  try {
    assert.equal(model.tensors.size, 216);
    assert.deepEqual(model.metadata, { format: 'pt' });
    assert.deepEqual(model.info('layers.0.attn.wq_a.weight').shape, [32, 64]);
    assert.equal(model.info('layers.0.attn.wq_a.weight').dtype, 'BF16');
    assert.deepEqual(model.info('embed.weight').shape, [256, 64]);
    assert.deepEqual(model.info('layers.0.hc_attn_fn').shape, [24, 256]);
    assert.equal(model.info('layers.0.hc_attn_fn').dtype, 'F32');
    const norm = model.readTensorF32('norm.weight');
    assert.equal(norm.length, 64);
    // RMSNorm weights are 1 + 0.1 z: all near 1 and exactly bf16
    assert.ok(norm.every((v) => v > 0.5 && v < 1.5));
    const bits = new Uint32Array(norm.buffer, norm.byteOffset, norm.length);
    assert.ok(
      bits.every((b) => (b & 0xffff) === 0),
      'bf16 widened exactly',
    );
  } finally {
    model.close();
  }
  const golden = openSafetensors(`${TINY_A}/golden.safetensors`);
  try {
    const ids = golden.readTensorI32('prompt_ids');
    const manual = await manualReadI32(`${TINY_A}/golden.safetensors`, 'prompt_ids');
    t.diagnostic(`prompt_ids[0] = ${ids[0]} (independent parse: ${manual.values[0]})`);
    assert.deepEqual(golden.info('prompt_ids').shape, [48]);
    assert.deepEqual(manual.shape, [48]);
    assert.deepEqual([...ids], manual.values);
    assert.ok(ids.every((v) => v >= 3 && v < 256));
    const generated = golden.readTensorI32('generated_ids');
    assert.deepEqual([...generated], [153, 167, 173, 199, 242, 15, 176, 201, 79, 226, 199, 242, 15, 159, 124, 29, 19]);
    assert.deepEqual(golden.info('logits').shape, [17, 256]);
    assert.equal(golden.readTensorF32('logits').length, 17 * 256);
    assert.equal(golden.readTensorU8('prefill.layer1.topk_tie').length, 48);
  } finally {
    golden.close();
  }
});

/** Writes a file with a hand-made header (no validation on our side). */
async function writeRaw(path: string, header: unknown, dataBytes: number, headerLenOverride?: bigint): Promise<void> {
  const json = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header));
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(headerLenOverride ?? BigInt(json.length));
  await writeFile(path, Buffer.concat([len, json, Buffer.alloc(dataBytes)]));
}

test('corrupted files give a CheckpointError naming the file and the tensor', async () => {
  await withTempDir(async (dir) => {
    const p = join(dir, 'bad.safetensors');
    const good = { w: { dtype: 'F32', shape: [2, 2], data_offsets: [0, 16] } };
    const cases: Array<[string, () => Promise<void>, RegExp, string | undefined]> = [
      ['too short', () => writeFile(p, Buffer.alloc(5)), /too short/, undefined],
      ['header length past the end', () => writeRaw(p, good, 16, 1000000n), /header length 1000000 exceeds/, undefined],
      ['huge header length', () => writeRaw(p, good, 16, 2n ** 63n), /header length \d+ exceeds/, undefined],
      ['bad JSON', () => writeRaw(p, '{"w": {', 16), /not valid JSON/, undefined],
      ['header not an object', () => writeRaw(p, [1, 2], 16), /not a JSON object/, undefined],
      ['unknown dtype', () => writeRaw(p, { w: { dtype: 'F4', shape: [2], data_offsets: [0, 1] } }, 1), /unknown or unsupported dtype "F4"/, 'w'],
      ['bad shape', () => writeRaw(p, { w: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }, 4), /shape must be/, 'w'],
      [
        'offsets out of range',
        () => writeRaw(p, { w: { dtype: 'F32', shape: [2, 2], data_offsets: [0, 32] } }, 16),
        /outside the data section of 16 bytes/,
        'w',
      ],
      ['size mismatch', () => writeRaw(p, { w: { dtype: 'F32', shape: [2, 2], data_offsets: [0, 12] } }, 16), /span 12 bytes, but F32 \[2, 2\] needs 16/, 'w'],
      ['begin > end', () => writeRaw(p, { w: { dtype: 'F32', shape: [0], data_offsets: [8, 4] } }, 16), /begin > end/, 'w'],
      [
        'overlap',
        () => writeRaw(p, { a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] }, b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] } }, 12),
        /overlaps tensor "a"/,
        'b',
      ],
      ['bad metadata', () => writeRaw(p, { __metadata__: { x: 1 }, ...good }, 16), /__metadata__\.x is not a string/, undefined],
    ];
    for (const [label, make, message, tensor] of cases) {
      await make();
      assert.throws(
        () => openSafetensors(p),
        (e: unknown) => {
          assert.ok(e instanceof CheckpointError, `${label}: expected a CheckpointError, got ${String(e)}`);
          assert.equal(e.code, 'checkpoint-invalid');
          assert.ok(e.message.startsWith(p), `${label}: ${e.message}`);
          assert.match(e.message, message, label);
          assert.equal(e.tensor, tensor, label);
          return true;
        },
      );
    }
    // a real file truncated in its data section
    const real = join(dir, 'real.safetensors');
    await writeSafetensors(real, [
      { name: 'a', dtype: 'F32', shape: [4], data: new Float32Array(4) },
      { name: 'b', dtype: 'F32', shape: [4], data: new Float32Array(4) },
    ]);
    const size = (await readFile(real)).length;
    await truncate(real, size - 3);
    assert.throws(
      () => openSafetensors(real),
      (e: unknown) => e instanceof CheckpointError && e.tensor === 'b' && /truncated file/.test(e.message),
    );
    assert.throws(
      () => openSafetensors(join(dir, 'missing.safetensors')),
      (e: unknown) => e instanceof CheckpointError && /cannot open/.test(e.message),
    );
  });
});
