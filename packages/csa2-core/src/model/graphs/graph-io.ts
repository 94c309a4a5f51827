/**
 * @module model/graphs/graph-io
 * Typed graph I/O: each model graph has a signature (the element type of every input and output, some
 * of them present only for some layer roles), and `TypedGraph` runs a session against it. Feeds and
 * results are typed by the signature, so model code reads `out.q.data` as a Float32Array without casts;
 * the session's own input and output lists are checked against the signature once, when it is opened,
 * and every result's element type on each run.
 *
 * @example
 *   const g = await TypedGraph.open('head', bytes, HEAD_SIGNATURE, runtime, threads);
 *   const { logits } = await g.run({ X: f32(x, [1, n, d]), pre: f32(p, [1, n]) });   // logits: TensorOf<'float32'>
 */
import { Csa2Error } from '../../errors.js';
import { openGraphSession, type GraphSession, type HostTensor, type RuntimeOptions, type TensorOf, type TensorType } from '../../runtime/ort-session.js';

/** Names and element types of some graph values. */
export type Io = Readonly<Record<string, TensorType>>;
export type Tensors<T extends Io> = { readonly [K in keyof T]: TensorOf<T[K]> };
type PartialTensors<T extends Io> = { readonly [K in keyof T]?: TensorOf<T[K]> };

/**
 * A graph's signature. Optional values exist only in some builds of the graph (e.g. the compressor
 * inputs of a KV-source layer's attnIn).
 */
export interface GraphSignature<I extends Io, O extends Io, OptI extends Io = Record<never, TensorType>, OptO extends Io = Record<never, TensorType>> {
  readonly inputs: I;
  readonly outputs: O;
  readonly optionalInputs?: OptI;
  readonly optionalOutputs?: OptO;
}

export type FeedsOf<S> = S extends GraphSignature<infer I, Io, infer OptI, Io> ? Tensors<I> & PartialTensors<OptI> : never;
export type OutputsOf<S> = S extends GraphSignature<Io, infer O, Io, infer OptO> ? Tensors<O> & PartialTensors<OptO> : never;

export class TypedGraph<S extends GraphSignature<Io, Io, Io, Io>> {
  private constructor(
    private readonly session: GraphSession,
    private readonly signature: S,
    private readonly types: ReadonlyMap<string, TensorType>,
  ) {}

  get name(): string {
    return this.session.name;
  }

  /** Opens a session over the graph bytes and checks its inputs and outputs against the signature. */
  static async open<S extends GraphSignature<Io, Io, Io, Io>>(
    name: string,
    bytes: Uint8Array,
    signature: S,
    runtime: RuntimeOptions,
    threads: number,
    memoryArena: boolean = runtime.memoryArena,
  ): Promise<TypedGraph<S>> {
    const session = await openGraphSession(name, bytes, runtime, threads, memoryArena);
    const check = (what: string, actual: readonly string[], required: Io, optional: Io | undefined) => {
      const known = new Set([...Object.keys(required), ...Object.keys(optional ?? {})]);
      const missing = Object.keys(required).filter((k) => !actual.includes(k));
      const unknown = actual.filter((k) => !known.has(k));
      if (missing.length > 0 || unknown.length > 0) {
        throw new Csa2Error(
          'runtime',
          `graph ${name}: ${what} differ from its signature (missing ${missing.join(', ') || 'none'}; unexpected ${unknown.join(', ') || 'none'})`,
        );
      }
    };
    check('inputs', session.inputNames, signature.inputs, signature.optionalInputs);
    check('outputs', session.outputNames, signature.outputs, signature.optionalOutputs);
    const types = new Map<string, TensorType>(Object.entries({ ...signature.optionalOutputs, ...signature.outputs }));
    return new TypedGraph(session, signature, types);
  }

  async run(feeds: FeedsOf<S>): Promise<OutputsOf<S>> {
    const out = await this.session.run(feeds as Readonly<Record<string, HostTensor>>);
    for (const [k, v] of Object.entries(out)) {
      const want = this.types.get(k);
      if (want !== v.type) throw new Csa2Error('runtime', `graph ${this.session.name}: output ${k} is ${v.type}, its signature says ${String(want)}`);
    }
    return out as OutputsOf<S>;
  }

  /** True when this build of the graph has the (optional) output. */
  hasOutput(name: keyof S['outputs'] | keyof NonNullable<S['optionalOutputs']>): boolean {
    return this.session.outputNames.includes(name as string);
  }

  dispose(): Promise<void> {
    return this.session.dispose();
  }

  get spec(): S {
    return this.signature;
  }
}

/** An optional output the caller's layer role requires. */
export function required<T>(value: T | undefined, graph: string, output: string): T {
  if (value === undefined) throw new Csa2Error('runtime', `graph ${graph} has no output ${output}`);
  return value;
}
