/**
 * onnxruntime-node's InferenceSession.prototype.run wrapped to time every run by its session's input
 * and output names (one signature per graph kind) and by its input shapes, while `on` is true. For the
 * diagnostics in this folder only (it patches onnxruntime's prototype; the suites use @csa2/core's API).
 */
import { createRequire } from 'node:module';

export async function timeOrtRuns() {
  const ort = await import(createRequire(import.meta.resolve('@csa2/core')).resolve('onnxruntime-node'));
  const proto = ort.InferenceSession.prototype;
  const run = proto.run;
  const state = { on: false, bySignature: new Map() };
  proto.run = async function timedRun(feeds, ...rest) {
    if (!state.on) return run.call(this, feeds, ...rest);
    const t0 = performance.now();
    const out = await run.call(this, feeds, ...rest);
    const ms = performance.now() - t0;
    const key = `${this.inputNames.join(',')} -> ${this.outputNames.join(',')}`;
    const shapes = Object.values(feeds)
      .map((t) => t.dims.join('x'))
      .join(' ');
    const a = state.bySignature.get(key) ?? { ms: 0, runs: 0, shapes: new Map() };
    a.ms += ms;
    a.runs++;
    a.shapes.set(shapes, (a.shapes.get(shapes) ?? 0) + ms);
    state.bySignature.set(key, a);
    return out;
  };
  return state;
}

/** The timed runs by signature, costliest first: per signature its ms and runs per `steps`, and its two costliest input shapes. */
export function bySignatureLines(state, steps) {
  return [...state.bySignature.entries()]
    .sort((x, y) => y[1].ms - x[1].ms)
    .map(([key, a]) => {
      const top = [...a.shapes.entries()]
        .sort((x, y) => y[1] - x[1])
        .slice(0, 2)
        .map(([sh, ms]) => `${sh} (${(ms / steps).toFixed(1)} ms)`)
        .join('; ');
      return `${(a.ms / steps).toFixed(1).padStart(8)} ms ${String(+(a.runs / steps).toFixed(1)).padStart(5)} runs  ${key}  [${top}]`;
    });
}
