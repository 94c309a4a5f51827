/**
 * @module numerics/f32
 * torch's float32 elementwise functions, evaluated in TypeScript op by op: each operation's result is
 * rounded to float32 (Math.fround), as torch does on a CPU (its float exp and log are within 1 ulp).
 */
const f = Math.fround;

/** torch's softplus (beta 1, threshold 20), on a float32 input, each step rounded to float32. */
export function softplusF32(x: number): number {
  return x > 20 ? x : f(Math.log1p(f(Math.exp(x))));
}

/** torch's float sigmoid, op by op: 1 / (1 + exp(-x)), each result rounded to float32. */
export function sigmoidF32(x: number): number {
  return f(1 / f(1 + f(Math.exp(-x))));
}
