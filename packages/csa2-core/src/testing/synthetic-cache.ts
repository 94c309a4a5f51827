/**
 * @module testing/synthetic-cache
 * Fills a Sequence with random token ids and random, valid packed global-cache rows (E2M1 codes under
 * modest E4M3 / UE8M0 scales), as if `tokens` tokens had been encoded: for benchmarks and memory tests
 * at contexts an actual encode would take hours to reach on a CPU. The decoder path (encoder replay,
 * decoder replay, decode steps) runs on such a sequence exactly as on an encoded one; only the
 * values are not a model's.
 */
import type { Sequence } from '../model/sequence/sequence.js';
import { SeededRandom } from '../weights/init-model.js';

/** Random rows: payload bytes uniform, scale bytes from `scaleBytes` (inclusive range). */
function randomRows(rng: SeededRandom, rows: number, width: number, block: number, scaleBytes: readonly [number, number]): Uint8Array {
  const rowBytes = width / 2 + width / block;
  const out = new Uint8Array(rows * rowBytes);
  const [lo, hi] = scaleBytes;
  for (let r = 0; r < rows; r++) {
    const o = r * rowBytes;
    for (let i = 0; i < width / 2; i += 4) {
      const u = rng.nextU32();
      out[o + i] = u & 0xff;
      out[o + i + 1] = (u >>> 8) & 0xff;
      out[o + i + 2] = (u >>> 16) & 0xff;
      out[o + i + 3] = u >>> 24;
    }
    for (let b = 0; b < width / block; b++) out[o + width / 2 + b] = lo + (rng.nextU32() % (hi - lo + 1));
  }
  return out;
}

/** Appends `tokens` random ids (below `vocabSize`) and the packed rows of the entries they complete. */
export function fillSyntheticCache(seq: Sequence, tokens: number, vocabSize: number, seed = 1): void {
  const rng = new SeededRandom(seed);
  const start = seq.length;
  seq.reserveTokens(start + tokens);
  const ids = new Uint32Array(tokens);
  for (let i = 0; i < tokens; i++) ids[i] = rng.nextU32() % vocabSize;
  seq.tokens.append(ids);
  const { headDim: D, indexHeadDim: dI } = seq.shape;
  // generate in slabs so that no single allocation is the whole cache twice over
  const SLAB = 65536;
  for (const cache of seq.caches.values()) {
    const want = Math.floor(seq.length / cache.ratio);
    for (let have = cache.entries; have < want; have = cache.entries) {
      const n = Math.min(SLAB, want - have);
      cache.mainKv.append(randomRows(rng, n, D, 16, [0x28, 0x38])); // E4M3 scales 0.25 … 1
      cache.indexK.append(randomRows(rng, n, dI, 32, [124, 128])); // UE8M0 scales 2^-3 … 2
    }
  }
}
