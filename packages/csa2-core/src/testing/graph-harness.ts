/**
 * @module testing/graph-harness
 * Test helper for the GraphOps emitters (model/graphs/graph-ops.ts): builds a tiny ONNX graph around one
 * emitter with GraphBuilder, opens it with onnxruntime-node exactly as the model does
 * (`openGraphSession` with DEFAULT_RUNTIME_OPTIONS, i.e. CPU, 'basic' optimization) and runs it;
 * plus the few comparison helpers the emitter tests share (bit equality, fp32 error bounds, bf16
 * faithful rounding).
 *
 * @example
 *   const out = await runEmitter('silu', 'fp32', { x: f32(values, [n]) }, (c) => {
 *     c.output('y', c.ops.silu(c.inputs['x']!), [n]);
 *   });
 *   const y = outF32(out, 'y');
 */
import { GraphBuilder, type Dim, type ElemType } from '../onnx/graph-builder.js';
import { GraphOps, type NumericsMode } from '../model/graphs/graph-ops.js';
import { DEFAULT_RUNTIME_OPTIONS, openGraphSession, type GraphSession, type HostTensor } from '../runtime/ort-session.js';
import { roundBf16 } from '../numerics/bf16.js';
import type { SeededRandom } from '../weights/init-model.js';

/** What a graph-building callback gets: the builder, the emitters, its inputs by name, and a way to declare outputs. */
export interface EmitterContext {
  readonly g: GraphBuilder;
  readonly ops: GraphOps;
  /** Graph value names of the declared inputs (the same names as the feeds). */
  readonly inputs: Readonly<Record<string, string>>;
  /** Declares a graph output (float32 unless `type` says otherwise). */
  output(name: string, value: string, dims: readonly Dim[], type?: ElemType): void;
}

/** Element type names of the host tensors, as ONNX element types. */
const HOST_TYPE: Record<HostTensor['type'], ElemType> = { float32: 'float32', int32: 'int32', int64: 'int64', bool: 'bool', uint8: 'uint8' };

/**
 * Builds a graph whose inputs have the types and dims of `feeds`, lets `build` wire emitters between
 * them, and opens an onnxruntime session over it. The session can be run on other feeds of the same
 * shapes. Dispose it when done.
 */
export async function openEmitterGraph(
  name: string,
  mode: NumericsMode,
  feeds: Readonly<Record<string, HostTensor>>,
  build: (c: EmitterContext) => void,
): Promise<GraphSession> {
  const g = new GraphBuilder(name);
  const ops = new GraphOps(g, mode);
  const inputs: Record<string, string> = {};
  for (const [key, t] of Object.entries(feeds)) inputs[key] = g.input(key, HOST_TYPE[t.type], t.dims);
  let outputs = 0;
  build({
    g,
    ops,
    inputs,
    output(outName, value, dims, type = 'float32') {
      g.output(value, outName, type, dims);
      outputs++;
    },
  });
  if (outputs === 0) throw new Error(`emitter graph ${name}: no outputs declared`);
  return openGraphSession(name, g.toBytes(), DEFAULT_RUNTIME_OPTIONS);
}

/** `openEmitterGraph`, one run on `feeds`, dispose. */
export async function runEmitter(
  name: string,
  mode: NumericsMode,
  feeds: Readonly<Record<string, HostTensor>>,
  build: (c: EmitterContext) => void,
): Promise<Record<string, HostTensor>> {
  const session = await openEmitterGraph(name, mode, feeds, build);
  try {
    return await session.run(feeds);
  } finally {
    await session.dispose();
  }
}

/** The float32 data of output `name` (throws if missing or of another type). */
export function outF32(outputs: Readonly<Record<string, HostTensor>>, name: string): Float32Array {
  const t = outputs[name];
  if (t === undefined || t.type !== 'float32') throw new Error(`output ${name}: missing or not float32`);
  return t.data;
}

// ---------------------------------------------------------------------------------------------
// inputs

/** `count` fp32 values offset + scale·N(0, 1) from `rng`. */
export function normalF32(rng: SeededRandom, count: number, scale = 1, offset = 0): Float32Array {
  return Float32Array.from({ length: count }, () => offset + scale * rng.nextNormal());
}

/** Element-wise |x| as float64. */
export function absolute(x: ArrayLike<number>): Float64Array {
  return Float64Array.from({ length: x.length }, (_, i) => Math.abs(x[i] as number));
}

// ---------------------------------------------------------------------------------------------
// comparisons: each returns the list of offending elements (empty = pass), so a test can also show
// that a perturbed input is caught (non-empty)

/** fp32 unit roundoff, 2^-24. */
export const U32 = 2 ** -24;
/** bf16 unit roundoff (half an ulp, relative), 2^-8. */
export const U_BF16 = 2 ** -8;

/** The fp32 bit patterns of `a` and `b` differ (so -0 ≠ +0; every NaN pattern compares by bits). */
export function bitMismatches(actual: Float32Array, expected: Float32Array): string[] {
  if (actual.length !== expected.length) return [`length ${actual.length} vs ${expected.length}`];
  const a = new Uint32Array(actual.buffer, actual.byteOffset, actual.length);
  const e = new Uint32Array(expected.buffer, expected.byteOffset, expected.length);
  const bad: string[] = [];
  for (let i = 0; i < a.length; i++) if (a[i] !== e[i]) bad.push(`[${i}] ${actual[i]} vs ${expected[i]}`);
  return bad;
}

/** |actual - expected| > bound[i] (or NaN on either side). */
export function boundMismatches(actual: ArrayLike<number>, expected: ArrayLike<number>, bound: (i: number) => number): string[] {
  if (actual.length !== expected.length) return [`length ${actual.length} vs ${expected.length}`];
  const bad: string[] = [];
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i] as number;
    const e = expected[i] as number;
    const b = bound(i);
    if (!(Math.abs(a - e) <= b)) bad.push(`[${i}] ${a} vs ${e} (|diff| ${Math.abs(a - e)} > ${b})`);
  }
  return bad;
}

/**
 * bf16 outputs that are not a round-to-nearest-even bf16 of some value within slack[i] of the exact
 * expected[i]: actual must be a bf16 value in [bf16(expected - slack), bf16(expected + slack)]
 * (rounding is monotonic). With slack = the fp32 error bound of the arithmetic before the cast, this
 * is "one correct bf16 rounding of the fp32 result": exact bf16(expected) except where expected lies
 * within slack of a rounding midpoint, where the neighbour is allowed too.
 */
export function bf16Mismatches(actual: Float32Array, expected: ArrayLike<number>, slack: (i: number) => number): string[] {
  if (actual.length !== expected.length) return [`length ${actual.length} vs ${expected.length}`];
  const bits = new Uint32Array(actual.buffer, actual.byteOffset, actual.length);
  const bad: string[] = [];
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i] as number;
    const e = expected[i] as number;
    const s = slack(i);
    const lo = roundBf16(e - s);
    const hi = roundBf16(e + s);
    if (((bits[i] as number) & 0xffff) !== 0 || !(a >= lo && a <= hi)) bad.push(`[${i}] ${a} vs exact ${e} (bf16 range [${lo}, ${hi}])`);
  }
  return bad;
}

/** Formats at most a few offending elements for an assertion message. */
export function describe(label: string, bad: readonly string[]): string {
  return `${label}: ${bad.length} mismatches: ${bad.slice(0, 6).join('; ')}${bad.length > 6 ? '; …' : ''}`;
}
