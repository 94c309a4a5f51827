/**
 * @module model/indexer/wasm-asm
 * The few pieces of the WebAssembly binary format that the hand-written kernels (model/indexer/indexer-kernels,
 * model/indexer/indexer-fused) are assembled from: LEB128 numbers, sections, the scalar and SIMD instructions
 * they use, and the instantiation of a module with one exported memory. Opcodes from the WebAssembly
 * core specification (2.0, SIMD included: prefix 0xfd and a LEB128 opcode).
 */

export const uleb = (n: number): number[] => {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n !== 0) b |= 0x80;
    out.push(b);
  } while (n !== 0);
  return out;
};
export const sleb = (n: number): number[] => {
  const out: number[] = [];
  for (;;) {
    const b = n & 0x7f;
    n >>= 7;
    if ((n === 0 && (b & 0x40) === 0) || (n === -1 && (b & 0x40) !== 0)) return [...out, b];
    out.push(b | 0x80);
  }
};
export const section = (id: number, bytes: number[]): number[] => [id, ...uleb(bytes.length), ...bytes];
export const vector = (items: number[][]): number[] => [...uleb(items.length), ...items.flat()];
export const name = (s: string): number[] => [...uleb(s.length), ...Array.from(s, (ch) => ch.charCodeAt(0))];

export const [I32, F32, V128] = [0x7f, 0x7d, 0x7b];
export const get = (i: number) => [0x20, i];
export const set = (i: number) => [0x21, i];
export const tee = (i: number) => [0x22, i];
export const i32c = (v: number) => [0x41, ...sleb(v)];
export const f32c0 = [0x43, 0, 0, 0, 0];
/** f32.const -Infinity. */
export const f32cNegInf = [0x43, 0x00, 0x00, 0x80, 0xff];
export const [add, sub, mul, and, xor, shl, shrS, shrU, geU] = [[0x6a], [0x6b], [0x6c], [0x71], [0x73], [0x74], [0x75], [0x76], [0x4f]];
export const [fAdd, fMul, i32OfF32, f32OfI32] = [[0x92], [0x94], [0xbc], [0xbe]];
export const load8 = (off: number) => [0x2d, 0, ...uleb(off)];
export const load32 = [0x28, 2, 0];
export const store32 = [0x36, 2, 0];
export const [eqz, ctz] = [[0x45], [0x68]];
export const loadF32 = (off = 0) => [0x2a, 2, ...uleb(off)];
export const storeF32 = [0x38, 2, 0];
export const load64 = (off: number) => [0x29, 3, ...uleb(off)];
export const store64 = (off: number) => [0x37, 3, ...uleb(off)];
export const [block, loop, end] = [[0x02, 0x40], [0x03, 0x40], [0x0b]];
export const br = (d: number) => [0x0c, d];
export const brIf = (d: number) => [0x0d, d];
/** The i32 on the stack, as float32 bits, rounded to bf16 bits (round to nearest even); uses local `t`. */
export const bf16Bits = (t: number) => [
  ...set(t),
  ...get(t),
  ...get(t),
  ...i32c(16),
  ...shrU,
  ...i32c(1),
  ...and,
  ...add,
  ...i32c(0x7fff),
  ...add,
  ...i32c(-65536),
  ...and,
];

// SIMD (0xfd prefix)
const simd = (op: number, ...imm: number[]) => [0xfd, ...uleb(op), ...imm];
/** v128.load / store at the address on the stack plus `off` (alignment hint 1 byte: the kernels' rows need not be aligned). */
export const vLoad = (off = 0) => simd(0x00, 0, ...uleb(off));
export const vStore = (off = 0) => simd(0x0b, 0, ...uleb(off));
export const vConst = (bytes: readonly number[]) => simd(0x0c, ...bytes);
export const vConstI32 = (lanes: readonly [number, number, number, number]) =>
  vConst(lanes.flatMap((v) => [v & 0xff, (v >>> 8) & 0xff, (v >>> 16) & 0xff, (v >>> 24) & 0xff]));
export const i8x16Shuffle = (lanes: readonly number[]) => simd(0x0d, ...lanes);
export const i8x16Swizzle = simd(0x0e);
export const vLoad32Splat = (off = 0) => simd(0x09, 0, ...uleb(off));
export const f32x4Splat = simd(0x13);
export const f32x4ReplaceLane = (l: number) => simd(0x20, l);
export const i32x4ExtractLane = (l: number) => simd(0x1b, l);
export const f32x4ExtractLane = (l: number) => simd(0x1f, l);
export const vAnd = simd(0x4e);
export const vAndNot = simd(0x4f);
export const i8x16ShrU = simd(0x6d);
export const i32x4ExtaddPairwiseI16x8S = simd(0x7e);
export const i16x8ExtendLowI8x16S = simd(0x87);
export const i16x8ExtendHighI8x16S = simd(0x88);
export const i16x8Add = simd(0x8e);
export const i16x8ExtmulLowI8x16S = simd(0x9c);
export const i16x8ExtmulHighI8x16S = simd(0x9d);
export const i32x4ShrS = simd(0xac);
export const i32x4ShrU = simd(0xad);
export const i32x4Add = simd(0xae);
export const i32x4DotI16x8S = simd(0xba);
export const f32x4Add = simd(0xe4);
export const f32x4Mul = simd(0xe6);
export const f32x4ConvertI32x4S = simd(0xfa);
export const f32x4Ge = simd(0x46);
/** f32x4.pmax: lane-wise `a < b ? b : a` (a NaN b leaves a). */
export const f32x4Pmax = simd(0xeb);
export const i32x4Bitmask = simd(0xa4);

/** The part of the WebAssembly API used here (the workspace's type libraries do not declare it; Node has it). */
export interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
interface WasmApi {
  readonly Module: new (bytes: Uint8Array) => object;
  readonly Instance: new (module: object, imports: object) => { readonly exports: Readonly<Record<string, unknown>> };
}
const wasmApi = (globalThis as unknown as { readonly WebAssembly: WasmApi }).WebAssembly;

/** Compiles module bytes (once per caller: keep the result). */
export const compileModule = (bytes: Uint8Array): object => new wasmApi.Module(bytes);

/** A new instance of a compiled module that exports its memory as `mem`. */
export function instantiateModule(compiled: object): { memory: WasmMemory; exports: Readonly<Record<string, unknown>> } {
  const { exports } = new wasmApi.Instance(compiled, {});
  return { memory: exports['mem'] as WasmMemory, exports };
}

/** Grows `memory` to at least `bytes`; its (possibly new) buffer. */
export function ensureBytes(memory: WasmMemory, bytes: number): ArrayBuffer {
  const have = memory.buffer.byteLength;
  if (bytes > have) memory.grow(Math.ceil((bytes - have) / 65536));
  return memory.buffer;
}

export const align64 = (n: number) => Math.ceil(n / 64) * 64;
