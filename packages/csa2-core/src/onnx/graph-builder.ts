/**
 * @module onnx/graph-builder
 * Builds ONNX graphs from TypeScript: named inputs, initializers (weights), nodes and outputs, then
 * serializes them with the protobuf writer. Values are referred to by name (string). The helper
 * methods cover the operators the model graphs use, at opset 21 (reductions, Slice, Squeeze and
 * Unsqueeze take their axes as inputs there).
 *
 * @example
 *   const g = new GraphBuilder('rmsnorm');
 *   const x = g.input('x', 'float32', ['rows', 64]);
 *   const ms = g.reduceMean(g.mul(x, x), [-1], true);
 *   g.output(g.div(x, g.sqrt(g.add(ms, g.scalar(1e-6)))), 'y', 'float32', ['rows', 64]);
 *   const bytes = g.toBytes();
 */
import { ProtoWriter } from './proto.js';

export type ElemType = 'float32' | 'float64' | 'int64' | 'int32' | 'bool' | 'bfloat16' | 'float8e4m3fn' | 'uint8';
export type Dim = number | string;
/** Attribute values: integers (and int lists) by default; floats must be wrapped. */
export type Attr = number | readonly number[] | string | { readonly float: number } | { readonly floats: readonly number[] };

/** ONNX TensorProto.DataType codes. */
const ELEM_CODE: Record<ElemType, number> = {
  float32: 1,
  uint8: 2,
  int32: 6,
  int64: 7,
  bool: 9,
  float64: 11,
  bfloat16: 16,
  float8e4m3fn: 17,
};

export const OPSET = 21;

/** Inputs that onnxruntime's kernels read in host memory, by operator (hostArgsComputed). */
const HOST_ARGS: Readonly<Record<string, readonly number[]>> = {
  Slice: [1, 2, 3, 4],
  Reshape: [1],
  Expand: [1],
  TopK: [1],
  Range: [0, 1, 2],
  ConstantOfShape: [0],
  Tile: [1],
  Pad: [1, 2, 3],
  Unsqueeze: [1],
  Squeeze: [1],
  ReduceSum: [1],
  ReduceMax: [1],
  ReduceMean: [1],
};
const IR_VERSION = 10;

function valueInfo(name: string, type: ElemType, dims: readonly Dim[]): ProtoWriter {
  const shape = new ProtoWriter();
  for (const d of dims) {
    const dim = new ProtoWriter();
    if (typeof d === 'number') dim.int(1, d);
    else dim.string(2, d);
    shape.message(1, dim);
  }
  const tensorType = new ProtoWriter().int(1, ELEM_CODE[type]).message(2, shape);
  const typeProto = new ProtoWriter().message(1, tensorType);
  return new ProtoWriter().string(1, name).message(2, typeProto);
}

function attribute(name: string, value: Attr): ProtoWriter {
  const a = new ProtoWriter().string(1, name);
  if (typeof value === 'number') {
    if (!Number.isInteger(value)) throw new Error(`attribute ${name}: ${value} is not an integer; wrap floats as { float }`);
    a.int(3, value).int(20, 2);
  } else if (typeof value === 'string') {
    a.string(4, value).int(20, 3);
  } else if (Array.isArray(value)) {
    for (const v of value as readonly number[]) a.int(8, v);
    a.int(20, 7);
  } else if ('float' in value) {
    a.float(2, value.float).int(20, 1);
  } else if ('floats' in value) {
    for (const v of value.floats) a.float(7, v);
    a.int(20, 6);
  }
  return a;
}

export class GraphBuilder {
  private readonly nodes: ProtoWriter[] = [];
  private readonly inputs: ProtoWriter[] = [];
  private readonly outputs: ProtoWriter[] = [];
  private readonly initializers: ProtoWriter[] = [];
  private readonly constCache = new Map<string, string>();
  /** Every node's operator and value names, and each value's producing node (hostArgsComputed). */
  private readonly dataflow: Array<{ op: string; inputs: string[]; outputs: string[] }> = [];
  private readonly producers = new Map<string, number>();
  private readonly initializerNames = new Set<string>();
  private counter = 0;
  /** Bytes of weight data embedded as initializers (for reporting). */
  initializerBytes = 0;
  /**
   * Prefixed to every initializer name from here on: builders that name their weights by role ('wq_a')
   * emit several layers into one graph under distinct prefixes (`withScope`).
   */
  private scope = '';
  /** Element types of the values whose type the builder knows: inputs, initializers, Cast outputs. */
  private readonly types = new Map<string, ElemType>();
  /** Cast outputs: what each cast and to which type; and the cast already made of a value to a type. */
  private readonly castSource = new Map<string, string>();
  private readonly castMade = new Map<string, string>();

  constructor(readonly name: string) {}

  private fresh(prefix: string): string {
    return `${prefix}_${this.counter++}`;
  }

  input(name: string, type: ElemType, dims: readonly Dim[]): string {
    this.inputs.push(valueInfo(name, type, dims));
    this.types.set(name, type);
    return name;
  }

  /** Declares `value` a graph output under `name` (an Identity node renames it). */
  output(value: string, name: string, type: ElemType, dims: readonly Dim[]): void {
    this.node('Identity', [value], {}, [name]);
    this.outputs.push(valueInfo(name, type, dims));
  }

  /** Runs `emit` with `prefix` before the names of the initializers it creates; returns what it returns. */
  withScope<T>(prefix: string, emit: () => T): T {
    const outer = this.scope;
    this.scope = outer + prefix;
    try {
      return emit();
    } finally {
      this.scope = outer;
    }
  }

  /** An initializer from raw little-endian bytes (named `name` within the current scope). */
  initializer(name: string, type: ElemType, dims: readonly number[], raw: Uint8Array): string {
    const full = this.scope + name;
    const t = new ProtoWriter();
    for (const d of dims) t.int(1, d);
    t.int(2, ELEM_CODE[type]).string(8, full).bytes(9, raw);
    this.initializers.push(t);
    this.initializerNames.add(full);
    this.initializerBytes += raw.byteLength;
    this.types.set(full, type);
    return full;
  }

  /** A float32 weight (copied into the graph). */
  weight(name: string, data: Float32Array, dims: readonly number[]): string {
    const n = dims.reduce((a, b) => a * b, 1);
    if (n !== data.length) throw new Error(`weight ${name}: ${data.length} values for dims [${dims.join(', ')}]`);
    return this.initializer(name, 'float32', dims, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  }

  /** A constant tensor, deduplicated by value. */
  const(type: 'float32' | 'int64' | 'int32' | 'uint8', values: readonly number[], dims: readonly number[] = [values.length]): string {
    const key = `${type}:${dims.join('x')}:${values.join(',')}`;
    const hit = this.constCache.get(key);
    if (hit !== undefined) return hit;
    const raw =
      type === 'float32'
        ? new Uint8Array(Float32Array.from(values).buffer)
        : type === 'int32'
          ? new Uint8Array(Int32Array.from(values).buffer)
          : type === 'uint8'
            ? Uint8Array.from(values)
            : new Uint8Array(BigInt64Array.from(values.map((v) => BigInt(v))).buffer);
    const name = this.initializer(this.fresh(`c_${type}`), type, dims, raw);
    this.constCache.set(key, name);
    return name;
  }

  /** A float32 scalar constant (rank 0). */
  scalar(v: number): string {
    return this.const('float32', [v], []);
  }

  ints(values: readonly number[]): string {
    return this.const('int64', values);
  }

  /** Adds a node; returns its output names. Empty string inputs mark omitted optional inputs. */
  node(op: string, inputs: readonly string[], attrs: Readonly<Record<string, Attr>> = {}, outputs: number | readonly string[] = 1): string[] {
    const outNames = typeof outputs === 'number' ? Array.from({ length: outputs }, () => this.fresh(op)) : [...outputs];
    const n = new ProtoWriter();
    for (const i of inputs) n.string(1, i);
    for (const o of outNames) n.string(2, o);
    n.string(3, this.fresh(`n_${op}`)).string(4, op);
    for (const [k, v] of Object.entries(attrs)) n.message(5, attribute(k, v));
    this.nodes.push(n);
    this.dataflow.push({ op, inputs: [...inputs], outputs: outNames });
    for (const o of outNames) this.producers.set(o, this.dataflow.length - 1);
    return outNames;
  }

  /**
   * The nodes that compute, from graph inputs, a value an operator reads in host memory (a Slice's
   * bounds, a Reshape's or an Expand's shape, a TopK's k, a Range's ends, a reduction's axes): an
   * accelerator's execution provider leaves such nodes to the CPU, a host round trip each. Values from
   * initializers and constants (folded when the session opens) and graph inputs read directly are fine.
   * `op input#i` per offending argument.
   */
  hostArgsComputed(): string[] {
    const constant = new Map<string, boolean>();
    const isConstant = (v: string): boolean => {
      const known = constant.get(v);
      if (known !== undefined) return known;
      if (this.initializerNames.has(v)) return true;
      const at = this.producers.get(v);
      if (at === undefined) return false; // a graph input
      const node = this.dataflow[at] as { inputs: string[] };
      const result = node.inputs.every((i) => i === '' || isConstant(i));
      constant.set(v, result);
      return result;
    };
    const bad: string[] = [];
    for (const node of this.dataflow) {
      const args = HOST_ARGS[node.op];
      if (args === undefined) continue;
      for (const i of args) {
        const v = node.inputs[i];
        if (v === undefined || v === '' || isConstant(v) || !this.producers.has(v)) continue;
        bad.push(`${node.op} input ${i} (${v}, from ${(this.dataflow[this.producers.get(v) as number] as { op: string }).op})`);
      }
    }
    return bad;
  }

  op(op: string, inputs: readonly string[], attrs: Readonly<Record<string, Attr>> = {}): string {
    return this.node(op, inputs, attrs, 1)[0] as string;
  }

  // ---- elementwise ----
  add(a: string, b: string): string {
    return this.op('Add', [a, b]);
  }
  sub(a: string, b: string): string {
    return this.op('Sub', [a, b]);
  }
  mul(a: string, b: string): string {
    return this.op('Mul', [a, b]);
  }
  div(a: string, b: string): string {
    return this.op('Div', [a, b]);
  }
  max(a: string, b: string): string {
    return this.op('Max', [a, b]);
  }
  min(a: string, b: string): string {
    return this.op('Min', [a, b]);
  }
  exp(a: string): string {
    return this.op('Exp', [a]);
  }
  log(a: string): string {
    return this.op('Log', [a]);
  }
  sqrt(a: string): string {
    return this.op('Sqrt', [a]);
  }
  abs(a: string): string {
    return this.op('Abs', [a]);
  }
  neg(a: string): string {
    return this.op('Neg', [a]);
  }
  relu(a: string): string {
    return this.op('Relu', [a]);
  }
  sigmoid(a: string): string {
    return this.op('Sigmoid', [a]);
  }
  round(a: string): string {
    return this.op('Round', [a]);
  }
  floor(a: string): string {
    return this.op('Floor', [a]);
  }
  clip(a: string, lo: number, hi: number): string {
    return this.op('Clip', [a, this.scalar(lo), this.scalar(hi)]);
  }
  where(cond: string, a: string, b: string): string {
    return this.op('Where', [cond, a, b]);
  }
  less(a: string, b: string): string {
    return this.op('Less', [a, b]);
  }
  greater(a: string, b: string): string {
    return this.op('Greater', [a, b]);
  }
  greaterOrEqual(a: string, b: string): string {
    return this.op('GreaterOrEqual', [a, b]);
  }
  equal(a: string, b: string): string {
    return this.op('Equal', [a, b]);
  }
  not(a: string): string {
    return this.op('Not', [a]);
  }
  /**
   * Cast to `to`. Exact shortcuts, no node: a value cast to a type once is that cast's output the next
   * time; a bfloat16 value widened to float32 and cast back is the bfloat16 value (the round trip is
   * the identity). Graphs that round to bf16 in several places keep one Cast per rounding.
   */
  cast(a: string, to: ElemType): string {
    const key = `${a}\u0000${to}`;
    const made = this.castMade.get(key);
    if (made !== undefined) return made;
    const src = this.castSource.get(a);
    if (to === 'bfloat16' && src !== undefined && this.types.get(a) === 'float32' && this.types.get(src) === 'bfloat16') return src;
    const out = this.op('Cast', [a], { to: ELEM_CODE[to] });
    this.castMade.set(key, out);
    this.castSource.set(out, a);
    this.types.set(out, to);
    return out;
  }

  // ---- linear algebra / shape ----
  matmul(a: string, b: string): string {
    return this.op('MatMul', [a, b]);
  }
  reshape(a: string, dims: readonly number[]): string {
    return this.op('Reshape', [a, this.ints(dims)]);
  }
  transpose(a: string, perm: readonly number[]): string {
    return this.op('Transpose', [a], { perm });
  }
  unsqueeze(a: string, axes: readonly number[]): string {
    return this.op('Unsqueeze', [a, this.ints(axes)]);
  }
  squeeze(a: string, axes: readonly number[]): string {
    return this.op('Squeeze', [a, this.ints(axes)]);
  }
  concat(values: readonly string[], axis: number): string {
    return this.op('Concat', values, { axis });
  }
  slice(a: string, axes: readonly number[], starts: readonly number[], ends: readonly number[]): string {
    return this.op('Slice', [a, this.ints(starts), this.ints(ends), this.ints(axes)]);
  }
  gather(data: string, indices: string, axis = 0): string {
    return this.op('Gather', [data, indices], { axis });
  }
  reduceMax(a: string, axes: readonly number[], keepdims: boolean): string {
    return this.op('ReduceMax', [a, this.ints(axes)], { keepdims: keepdims ? 1 : 0 });
  }
  reduceSum(a: string, axes: readonly number[], keepdims: boolean): string {
    return this.op('ReduceSum', [a, this.ints(axes)], { keepdims: keepdims ? 1 : 0 });
  }
  reduceMean(a: string, axes: readonly number[], keepdims: boolean): string {
    return this.op('ReduceMean', [a, this.ints(axes)], { keepdims: keepdims ? 1 : 0 });
  }

  /** Serializes the model (opset 21, IR 10). */
  toBytes(): Uint8Array {
    const g = new ProtoWriter();
    for (const n of this.nodes) g.message(1, n);
    g.string(2, this.name);
    for (const t of this.initializers) g.message(5, t);
    for (const i of this.inputs) g.message(11, i);
    for (const o of this.outputs) g.message(12, o);
    const opset = new ProtoWriter().string(1, '').int(2, OPSET);
    return new ProtoWriter().int(1, IR_VERSION).string(2, 'csa2-serve').message(8, opset).message(7, g).finish();
  }
}
