/**
 * @module weights/safetensors
 * Reader and streaming writer for the safetensors format (huggingface.co/docs/safetensors).
 *
 * | offset  | size | field                                                                 |
 * |---------|------|-----------------------------------------------------------------------|
 * | 0       | 8    | N: header length in bytes, unsigned 64-bit little-endian              |
 * | 8       | N    | UTF-8 JSON: { name: { dtype, shape, data_offsets: [begin, end] }, ... |
 * |         |      |   "__metadata__"?: { string: string } }, space-padded                 |
 * | 8 + N   | rest | the data section; data_offsets are relative to its start              |
 *
 * All values are little-endian, row-major. The reader validates the whole header when the file is
 * opened and reads tensor data lazily (a positioned read per tensor), so a multi-GB file is never held
 * in memory at once. Reads are synchronous on an open descriptor; call `close()` when done.
 * The writer streams: the tensor list and shapes are fixed up front, data is appended in order, and the
 * file appears under its final name only when `close()` succeeds.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { open, rename, rm } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { endianness } from 'node:os';
import { CheckpointError } from '../errors.js';

export type SafetensorsDtype =
  | 'F64'
  | 'F32'
  | 'F16'
  | 'BF16'
  | 'I64'
  | 'I32'
  | 'I16'
  | 'I8'
  | 'U64'
  | 'U32'
  | 'U16'
  | 'U8'
  | 'BOOL'
  | 'F8_E4M3'
  | 'F8_E5M2'
  | 'F8_E8M0';

/** Bytes per element of each supported dtype (sub-byte dtypes such as F4 are not supported). */
export const SAFETENSORS_DTYPE_BYTES: Readonly<Record<SafetensorsDtype, number>> = Object.freeze({
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U64: 8,
  U32: 4,
  U16: 2,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
  F8_E8M0: 1,
});

/** Header lengths above this are refused (the format's own limit is 100 MB). */
export const MAX_HEADER_BYTES = 100_000_000;

export function isSafetensorsDtype(value: unknown): value is SafetensorsDtype {
  return typeof value === 'string' && Object.hasOwn(SAFETENSORS_DTYPE_BYTES, value);
}

export interface TensorInfo {
  readonly name: string;
  readonly dtype: SafetensorsDtype;
  readonly shape: readonly number[];
  readonly byteOffset: number; // absolute offset in the file (8 + N + data_offsets[0])
  readonly byteLength: number;
}

export interface SafetensorsFile {
  readonly path: string;
  /** Tensor directory in header order (the `__metadata__` entry excluded). */
  readonly tensors: ReadonlyMap<string, TensorInfo>;
  readonly metadata: Readonly<Record<string, string>>;
  /** The info of one tensor; CheckpointError when absent. */
  info(name: string): TensorInfo;
  /** The stored bytes of one tensor, little-endian, exactly as in the file. */
  readTensorRaw(name: string): Uint8Array;
  /** BF16, F16 and F32 tensors widened exactly to float32. */
  readTensorF32(name: string): Float32Array;
  readTensorI32(name: string): Int32Array;
  readTensorI64(name: string): BigInt64Array;
  /** U8 (and BOOL) tensors. */
  readTensorU8(name: string): Uint8Array;
  close(): void;
}

export function numelOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

function assertLittleEndianHost(): void {
  if (endianness() !== 'LE') throw new CheckpointError('safetensors: only little-endian hosts are supported');
}

function fail(path: string, message: string, tensor?: string, cause?: unknown): CheckpointError {
  const where = tensor === undefined ? path : `${path}: tensor "${tensor}"`;
  const options: { tensor?: string; cause?: unknown } = {};
  if (tensor !== undefined) options.tensor = tensor;
  if (cause !== undefined) options.cause = cause;
  return new CheckpointError(`${where}: ${message}`, options);
}

function readFully(fd: number, path: string, position: number, length: number, tensor?: string): Uint8Array {
  const out = new Uint8Array(length);
  let done = 0;
  while (done < length) {
    const n = readSync(fd, out, done, length - done, position + done);
    if (n === 0) throw fail(path, `unexpected end of file at byte ${position + done} (wanted ${length} bytes at ${position})`, tensor);
    done += n;
  }
  return out;
}

function isNonNegInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

interface ParsedHeader {
  readonly tensors: Map<string, TensorInfo>;
  readonly metadata: Record<string, string>;
}

function parseHeader(path: string, headerText: string, dataStart: number, dataBytes: number): ParsedHeader {
  let header: unknown;
  try {
    header = JSON.parse(headerText);
  } catch (cause) {
    throw fail(path, `header is not valid JSON: ${cause instanceof Error ? cause.message : String(cause)}`, undefined, cause);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) throw fail(path, 'header is not a JSON object');
  const tensors = new Map<string, TensorInfo>();
  const metadata: Record<string, string> = {};
  const ranges: Array<{ name: string; begin: number; end: number }> = [];
  for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw fail(path, '__metadata__ is not an object');
      for (const [k, v] of Object.entries(raw as Record<string, unknown>)) {
        if (typeof v !== 'string') throw fail(path, `__metadata__.${k} is not a string`);
        metadata[k] = v;
      }
      continue;
    }
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw fail(path, 'header entry is not an object', name);
    const entry = raw as Record<string, unknown>;
    const dtype = entry['dtype'];
    if (!isSafetensorsDtype(dtype)) throw fail(path, `unknown or unsupported dtype ${JSON.stringify(dtype)}`, name);
    const shape = entry['shape'];
    if (!Array.isArray(shape) || !shape.every(isNonNegInt))
      throw fail(path, `shape must be a list of non-negative integers, got ${JSON.stringify(shape)}`, name);
    const offsets = entry['data_offsets'];
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isNonNegInt)) {
      throw fail(path, `data_offsets must be [begin, end] non-negative integers, got ${JSON.stringify(offsets)}`, name);
    }
    const [begin, end] = offsets as [number, number];
    if (begin > end) throw fail(path, `data_offsets [${begin}, ${end}] has begin > end`, name);
    if (end > dataBytes) {
      throw fail(path, `data_offsets [${begin}, ${end}] lie outside the data section of ${dataBytes} bytes (truncated file?)`, name);
    }
    const dims = shape as number[];
    const expected = numelOf(dims) * SAFETENSORS_DTYPE_BYTES[dtype];
    if (end - begin !== expected) {
      throw fail(path, `data_offsets [${begin}, ${end}] span ${end - begin} bytes, but ${dtype} [${dims.join(', ')}] needs ${expected}`, name);
    }
    tensors.set(name, Object.freeze({ name, dtype, shape: Object.freeze(dims), byteOffset: dataStart + begin, byteLength: end - begin }));
    ranges.push({ name, begin, end });
  }
  ranges.sort((a, b) => a.begin - b.begin || a.end - b.end);
  for (let i = 1; i < ranges.length; i++) {
    const prev = ranges[i - 1];
    const cur = ranges[i];
    if (prev !== undefined && cur !== undefined && cur.begin < prev.end && cur.end > cur.begin) {
      throw fail(path, `data [${cur.begin}, ${cur.end}] overlaps tensor "${prev.name}" [${prev.begin}, ${prev.end}]`, cur.name);
    }
  }
  return { tensors, metadata };
}

/** f16 bits -> f32 value (exact). */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Infinity : NaN;
  return sign * (1024 + mant) * 2 ** (exp - 25);
}

class SafetensorsReader implements SafetensorsFile {
  readonly path: string;
  readonly tensors: ReadonlyMap<string, TensorInfo>;
  readonly metadata: Readonly<Record<string, string>>;
  private fd: number | null;

  constructor(path: string, fd: number, header: ParsedHeader) {
    this.path = path;
    this.fd = fd;
    this.tensors = header.tensors;
    this.metadata = Object.freeze(header.metadata);
  }

  info(name: string): TensorInfo {
    const t = this.tensors.get(name);
    if (t === undefined) throw fail(this.path, 'not present in the file', name);
    return t;
  }

  readTensorRaw(name: string): Uint8Array {
    const t = this.info(name);
    if (this.fd === null) throw fail(this.path, 'file is closed', name);
    return readFully(this.fd, this.path, t.byteOffset, t.byteLength, name);
  }

  private expectDtype(name: string, allowed: readonly SafetensorsDtype[]): TensorInfo {
    const t = this.info(name);
    if (!allowed.includes(t.dtype)) throw fail(this.path, `has dtype ${t.dtype}, expected ${allowed.join(' or ')}`, name);
    return t;
  }

  readTensorF32(name: string): Float32Array {
    const t = this.expectDtype(name, ['F32', 'BF16', 'F16']);
    const raw = this.readTensorRaw(name);
    const n = numelOf(t.shape);
    if (t.dtype === 'F32') return new Float32Array(raw.buffer, raw.byteOffset, n);
    const bits = new Uint16Array(raw.buffer, raw.byteOffset, n);
    const out = new Float32Array(n);
    if (t.dtype === 'BF16') {
      const outBits = new Uint32Array(out.buffer);
      for (let i = 0; i < n; i++) outBits[i] = (bits[i] as number) << 16;
    } else {
      for (let i = 0; i < n; i++) out[i] = f16BitsToF32(bits[i] as number);
    }
    return out;
  }

  readTensorI32(name: string): Int32Array {
    const t = this.expectDtype(name, ['I32']);
    const raw = this.readTensorRaw(name);
    return new Int32Array(raw.buffer, raw.byteOffset, numelOf(t.shape));
  }

  readTensorI64(name: string): BigInt64Array {
    const t = this.expectDtype(name, ['I64']);
    const raw = this.readTensorRaw(name);
    return new BigInt64Array(raw.buffer, raw.byteOffset, numelOf(t.shape));
  }

  readTensorU8(name: string): Uint8Array {
    this.expectDtype(name, ['U8', 'BOOL']);
    return this.readTensorRaw(name);
  }

  close(): void {
    if (this.fd !== null) {
      closeSync(this.fd);
      this.fd = null;
    }
  }
}

/**
 * Opens a safetensors file and validates its header: header length within the file, JSON, known dtypes,
 * shapes, data_offsets inside the data section and equal to dtype size x numel, no overlaps. Every
 * failure is a {@link CheckpointError} naming the file (and the tensor when there is one).
 *
 * @example
 * const file = openSafetensors('model.safetensors');
 * try { const w = file.readTensorF32('embed.weight'); } finally { file.close(); }
 */
export function openSafetensors(path: string): SafetensorsFile {
  assertLittleEndianHost();
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (cause) {
    throw fail(path, `cannot open: ${cause instanceof Error ? cause.message : String(cause)}`, undefined, cause);
  }
  try {
    const fileBytes = fstatSync(fd).size;
    if (fileBytes < 8) throw fail(path, `file is ${fileBytes} bytes, too short for the 8-byte header length`);
    const lenBytes = readFully(fd, path, 0, 8);
    const headerLen = new DataView(lenBytes.buffer).getBigUint64(0, true);
    if (headerLen > BigInt(fileBytes - 8)) throw fail(path, `header length ${headerLen} exceeds the ${fileBytes - 8} bytes after the length field`);
    if (headerLen > BigInt(MAX_HEADER_BYTES)) throw fail(path, `header length ${headerLen} exceeds the ${MAX_HEADER_BYTES}-byte limit`);
    const n = Number(headerLen);
    const headerText = new TextDecoder('utf-8', { fatal: false }).decode(readFully(fd, path, 8, n));
    const header = parseHeader(path, headerText, 8 + n, fileBytes - 8 - n);
    return new SafetensorsReader(path, fd, header);
  } catch (err) {
    closeSync(fd);
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------------
// Writing

/** f32 -> bf16 bits, round to nearest even; NaN stays NaN (quiet, sign kept). */
export function f32ToBf16Bits(bits: number): number {
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x7fffff) !== 0) return ((bits >>> 16) | 0x40) & 0xffff;
  return ((bits >>> 0) + 0x7fff + ((bits >>> 16) & 1)) >>> 16;
}

/** f32 bits -> f16 bits, round to nearest even; overflow -> inf, NaN stays NaN. */
export function f32ToF16Bits(bits: number): number {
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  const mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 | (mant >>> 13) : 0);
  const e = exp - 112; // f16 biased exponent
  if (e >= 0x1f) return sign | 0x7c00;
  if (e >= 1) {
    let r = (e << 10) | (mant >>> 13);
    const rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest === 0x1000 && (r & 1) === 1)) r++; // may carry into inf: correct
    return sign | r;
  }
  // subnormal f16 (or zero): value = m * 2^(e - 38) with the implicit bit, f16 unit 2^-24
  const shift = 14 - e;
  if (shift > 24) return sign;
  const m = exp === 0 ? mant : mant | 0x800000; // f32 subnormals are far below the f16 range
  let r = m >>> shift;
  const rest = m & ((1 << shift) - 1);
  const half = 1 << (shift - 1);
  if (rest > half || (rest === half && (r & 1) === 1)) r++;
  return sign | r;
}

export type TensorData =
  | Float32Array
  | Float64Array
  | Uint16Array
  | Int16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array
  | Int8Array
  | Uint8Array;

export interface TensorSpec {
  readonly name: string;
  readonly dtype: SafetensorsDtype;
  readonly shape: readonly number[];
}

export interface TensorEntry extends TensorSpec {
  /**
   * Values in the element type of `dtype` (Float32Array for F32, and also for BF16/F16, which are
   * rounded to nearest even; Uint16Array = raw BF16/F16 bits; Int32Array for I32; ...), or a Uint8Array
   * of the exact stored bytes for any dtype.
   */
  readonly data: TensorData;
}

const CHUNK_ELEMENTS = 1 << 20;

function bytesOf(a: TensorData): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** Elements `data` holds when stored as `spec.dtype` (a Uint8Array is raw stored bytes for multi-byte dtypes). */
function elementCount(path: string, spec: TensorSpec, data: TensorData): number {
  const size = SAFETENSORS_DTYPE_BYTES[spec.dtype];
  if (data instanceof Uint8Array && size > 1) {
    if (data.byteLength % size !== 0) throw fail(path, `raw ${spec.dtype} data of ${data.byteLength} bytes is not a multiple of ${size}`, spec.name);
    return data.byteLength / size;
  }
  return data.length;
}

/** Whether `data` is an element type that can be stored as `dtype` (see {@link TensorEntry.data}). */
function dataMatches(dtype: SafetensorsDtype, data: TensorData): boolean {
  if (data instanceof Uint8Array) return true; // raw stored bytes (or U8/BOOL/F8 values)
  switch (dtype) {
    case 'F32':
      return data instanceof Float32Array;
    case 'BF16':
    case 'F16':
      return data instanceof Float32Array || data instanceof Uint16Array;
    case 'F64':
      return data instanceof Float64Array;
    case 'U16':
      return data instanceof Uint16Array;
    case 'I16':
      return data instanceof Int16Array;
    case 'I32':
      return data instanceof Int32Array;
    case 'U32':
      return data instanceof Uint32Array;
    case 'I64':
      return data instanceof BigInt64Array;
    case 'U64':
      return data instanceof BigUint64Array;
    case 'I8':
      return data instanceof Int8Array;
    case 'U8':
    case 'BOOL':
    case 'F8_E4M3':
    case 'F8_E5M2':
    case 'F8_E8M0':
      return false;
  }
}

/** Throws unless `data` can be stored as `spec.dtype`; returns its element count. */
function checkData(path: string, spec: TensorSpec, data: TensorData): number {
  if (!dataMatches(spec.dtype, data)) {
    throw fail(path, `cannot write ${spec.dtype} [${spec.shape.join(', ')}] from ${data.constructor.name}`, spec.name);
  }
  return elementCount(path, spec, data);
}

/** Yields the little-endian stored bytes of `data` (already checked) as `spec.dtype`, converting floats when needed. */
function* encodeData(spec: TensorSpec, data: TensorData): Generator<Uint8Array> {
  if ((spec.dtype === 'BF16' || spec.dtype === 'F16') && data instanceof Float32Array) {
    const toBits = spec.dtype === 'BF16' ? f32ToBf16Bits : f32ToF16Bits;
    const srcBits = new Uint32Array(data.buffer, data.byteOffset, data.length);
    for (let start = 0; start < data.length; start += CHUNK_ELEMENTS) {
      const end = Math.min(data.length, start + CHUNK_ELEMENTS);
      const piece = new Uint16Array(end - start);
      for (let i = start; i < end; i++) piece[i - start] = toBits(srcBits[i] as number);
      yield bytesOf(piece);
    }
    return;
  }
  yield bytesOf(data);
}

function validateSpecs(path: string, specs: readonly TensorSpec[]): void {
  const seen = new Set<string>();
  for (const s of specs) {
    if (s.name === '__metadata__' || s.name.length === 0) throw fail(path, 'reserved or empty tensor name', s.name);
    if (seen.has(s.name)) throw fail(path, 'listed twice', s.name);
    seen.add(s.name);
    if (!isSafetensorsDtype(s.dtype)) throw fail(path, `unknown dtype ${JSON.stringify(s.dtype)}`, s.name);
    if (!s.shape.every((d) => isNonNegInt(d))) throw fail(path, `bad shape [${s.shape.join(', ')}]`, s.name);
  }
}

/** The header bytes (length field + space-padded JSON) for `specs` written back to back in order. */
function encodeHeader(specs: readonly TensorSpec[], metadata: Readonly<Record<string, string>> | undefined): Uint8Array {
  const header: Record<string, unknown> = {};
  if (metadata !== undefined) header['__metadata__'] = metadata;
  let offset = 0;
  for (const s of specs) {
    const bytes = numelOf(s.shape) * SAFETENSORS_DTYPE_BYTES[s.dtype];
    header[s.name] = { dtype: s.dtype, shape: [...s.shape], data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.length / 8) * 8;
  if (padded !== json.length) {
    const p = new Uint8Array(padded).fill(0x20);
    p.set(json);
    json = p;
  }
  const out = new Uint8Array(8 + json.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  return out;
}

/**
 * Streaming safetensors writer: the tensor list (names, dtypes, shapes) is fixed up front, then each
 * tensor's data is appended in that order with {@link SafetensorsWriter.write}. Data goes to
 * `<path>.partial`, which is renamed to `path` by {@link SafetensorsWriter.close} once every tensor was
 * written; {@link SafetensorsWriter.abort} removes it.
 *
 * @example
 * const w = await SafetensorsWriter.create('model.safetensors', [{ name: 'w', dtype: 'BF16', shape: [2, 3] }]);
 * await w.write('w', new Float32Array(6));
 * await w.close();
 */
export class SafetensorsWriter {
  readonly path: string;
  readonly specs: readonly TensorSpec[];
  readonly dataBytes: number;
  private readonly partialPath: string;
  private handle: FileHandle | null;
  private next = 0;

  private constructor(path: string, specs: readonly TensorSpec[], handle: FileHandle, dataBytes: number) {
    this.path = path;
    this.specs = specs;
    this.partialPath = `${path}.partial`;
    this.handle = handle;
    this.dataBytes = dataBytes;
  }

  static async create(path: string, specs: readonly TensorSpec[], metadata?: Readonly<Record<string, string>>): Promise<SafetensorsWriter> {
    assertLittleEndianHost();
    validateSpecs(path, specs);
    const frozen = Object.freeze(specs.map((s) => Object.freeze({ name: s.name, dtype: s.dtype, shape: Object.freeze([...s.shape]) })));
    const header = encodeHeader(frozen, metadata);
    const dataBytes = frozen.reduce((acc, s) => acc + numelOf(s.shape) * SAFETENSORS_DTYPE_BYTES[s.dtype], 0);
    const handle = await open(`${path}.partial`, 'w');
    try {
      await handle.write(header);
    } catch (err) {
      await handle.close();
      await rm(`${path}.partial`, { force: true });
      throw err;
    }
    return new SafetensorsWriter(path, frozen, handle, dataBytes);
  }

  /** The spec of the tensor the next {@link write} must supply, or undefined when all are written. */
  get nextSpec(): TensorSpec | undefined {
    return this.specs[this.next];
  }

  private expect(name: string): { handle: FileHandle; spec: TensorSpec } {
    const handle = this.handle;
    if (handle === null) throw fail(this.path, 'writer is closed', name);
    const spec = this.specs[this.next];
    if (spec === undefined) throw fail(this.path, 'every declared tensor was already written', name);
    if (spec.name !== name) throw fail(this.path, `written out of order: expected "${spec.name}" next`, name);
    return { handle, spec };
  }

  private async writeBytes(handle: FileHandle, spec: TensorSpec, data: TensorData): Promise<void> {
    for (const piece of encodeData(spec, data)) {
      let done = 0;
      while (done < piece.byteLength) {
        const { bytesWritten } = await handle.write(piece, done, piece.byteLength - done);
        done += bytesWritten;
      }
    }
  }

  /**
   * Appends the whole data of the next tensor in the declared order; `name` must match it. A wrong
   * element type or count is refused before anything is written (the writer stays usable).
   */
  async write(name: string, data: TensorData): Promise<void> {
    const { handle, spec } = this.expect(name);
    const numel = numelOf(spec.shape);
    const count = checkData(this.path, spec, data);
    if (count !== numel)
      throw fail(
        this.path,
        `cannot write ${spec.dtype} [${spec.shape.join(', ')}] from ${data.constructor.name} of ${count} elements (expected ${numel})`,
        name,
      );
    await this.writeBytes(handle, spec, data);
    this.next++;
  }

  /**
   * Appends the next tensor's data piece by piece (row-major order), so a tensor larger than memory can
   * be streamed. The pieces must add up to exactly the declared element count; otherwise the writer is
   * aborted and the partial file removed.
   */
  async writeChunks(name: string, chunks: Iterable<TensorData> | AsyncIterable<TensorData>): Promise<void> {
    const { handle, spec } = this.expect(name);
    const numel = numelOf(spec.shape);
    let total = 0;
    try {
      for await (const chunk of chunks) {
        total += checkData(this.path, spec, chunk);
        if (total > numel) throw fail(this.path, `chunks exceed the ${numel} elements of [${spec.shape.join(', ')}]`, name);
        await this.writeBytes(handle, spec, chunk);
      }
      if (total !== numel) throw fail(this.path, `chunks hold ${total} elements, expected ${numel}`, name);
    } catch (err) {
      await this.abort();
      throw err;
    }
    this.next++;
  }

  /** Finishes the file: every declared tensor must have been written. */
  async close(): Promise<void> {
    const handle = this.handle;
    if (handle === null) return;
    const missing = this.specs[this.next];
    if (missing !== undefined) {
      await this.abort();
      throw fail(this.path, `closed before this tensor (and ${this.specs.length - this.next - 1} more) was written`, missing.name);
    }
    this.handle = null;
    await handle.close();
    await rename(this.partialPath, this.path);
  }

  /** Drops the partial file. */
  async abort(): Promise<void> {
    const handle = this.handle;
    this.handle = null;
    if (handle !== null) await handle.close();
    await rm(this.partialPath, { force: true });
  }
}

/**
 * Writes `tensors` to a safetensors file, one tensor at a time (see {@link SafetensorsWriter} for data
 * conventions). Float32Array data stored as BF16/F16 is rounded to nearest even.
 */
export async function writeSafetensors(path: string, tensors: readonly TensorEntry[], metadata?: Readonly<Record<string, string>>): Promise<void> {
  const writer = await SafetensorsWriter.create(path, tensors, metadata);
  try {
    for (const t of tensors) await writer.write(t.name, t.data);
    await writer.close();
  } catch (err) {
    await writer.abort();
    throw err;
  }
}
