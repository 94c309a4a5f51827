/**
 * @module model/attention/rope
 * RoPE tables exactly as the reference computes them (precompute_freqs_cis, csa2-reference.md §2.2):
 * frequencies and YaRN blend in fp32, angle = fp32(p · freq), cos/sin rounded to fp32.
 * Two tables per model: ratio-0 layers use `rope_theta` without YaRN; layers with ratio > 0 use
 * `compress_rope_theta` with YaRN when `original_seq_len` > 0.
 */
const f = Math.fround;

export interface RopeParams {
  readonly ropeDim: number;
  readonly base: number;
  /** YaRN parameters, or null for plain RoPE. */
  readonly yarn: { readonly originalSeqLen: number; readonly factor: number; readonly betaFast: number; readonly betaSlow: number } | null;
}

/** The YaRN ramp band [low, high] (dims of the complex pairs), or null without YaRN. */
export function yarnBand(p: RopeParams): { low: number; high: number } | null {
  if (p.yarn === null) return null;
  const dim = p.ropeDim;
  const corrected = (rotations: number) => (dim * Math.log(p.yarn!.originalSeqLen / (rotations * 2 * Math.PI))) / (2 * Math.log(p.base));
  const low = Math.max(Math.floor(corrected(p.yarn.betaFast)), 0);
  const high = Math.min(Math.ceil(corrected(p.yarn.betaSlow)), dim - 1);
  return { low, high };
}

/** Per-pair frequencies, fp32 like the reference. */
export function ropeFrequencies(p: RopeParams): Float32Array {
  const half = p.ropeDim / 2;
  const freqs = new Float32Array(half);
  for (let i = 0; i < half; i++) freqs[i] = f(1 / f(p.base ** f(f(2 * i) / p.ropeDim)));
  const band = yarnBand(p);
  if (band !== null && p.yarn !== null) {
    const denom = Math.max(band.high - band.low, 1e-3);
    for (let i = 0; i < half; i++) {
      const ramp = Math.min(Math.max(f(f(i - band.low) / f(denom)), 0), 1);
      const smooth = f(1 - ramp);
      const fi = freqs[i] as number;
      // freqs / factor * (1 - smooth) + freqs * smooth
      freqs[i] = f(f(f(fi / p.yarn.factor) * f(1 - smooth)) + f(fi * smooth));
    }
  }
  return freqs;
}

/** cos and sin tables [positions.length, ropeDim/2] for the given absolute positions. */
export function ropeRows(freqs: Float32Array, positions: ArrayLike<number>): { cos: Float32Array; sin: Float32Array } {
  const half = freqs.length;
  const cos = new Float32Array(positions.length * half);
  const sin = new Float32Array(positions.length * half);
  for (let r = 0; r < positions.length; r++) {
    const pos = positions[r] as number;
    for (let i = 0; i < half; i++) {
      const angle = f(pos * (freqs[i] as number));
      cos[r * half + i] = Math.cos(angle);
      sin[r * half + i] = Math.sin(angle);
    }
  }
  return { cos, sin };
}
