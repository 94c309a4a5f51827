/**
 * FLOP formulas against hand arithmetic on a small three-layer config (SWA, ratio-2 Full, ratio-1 Full
 * with the encoder–decoder split at layer 2). Every expected number below is written out from the
 * config's literal sizes, not computed with the functions under test.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildLayerPlan, parseModelConfig } from '@csa2/core';
import { attendedKeys, decodeStepFlops, decoderReplayFlops, denseLayerFlopsPerToken, encodeFlops, exactPrefillFlops, headFlops, spanFlops } from './flops.js';

// d=8, n=2, H=2, D=32, qL=4, G=2, R=4, hI=2, dI=32, E=2, k=1, I=4, V=16, W=2, K(topk)=1
const config = parseModelConfig({
  vocab_size: 16,
  dim: 8,
  n_layers: 3,
  n_heads: 2,
  head_dim: 32,
  rope_head_dim: 8,
  q_lora_rank: 4,
  o_groups: 2,
  o_lora_rank: 4,
  window_size: 2,
  compress_ratios: [0, 2, 1],
  kv_source_layers: [1, 2],
  index_source_layers: [1, 2],
  index_n_heads: 2,
  index_head_dim: 32,
  index_topk: 1,
  hc_mult: 2,
  moe_inter_dim: 4,
  n_routed_experts: 2,
  n_activated_experts: 1,
  n_mtp_layers: 0,
  dtype: 'bf16',
  expert_dtype: null,
  max_seq_len: 64,
});
const plan = buildLayerPlan(config);
const [L0, L1, L2] = plan.entries;

// Shared per-token terms (every layer):
//   hc mixes   2 · 2·(n·d)·((2+n)·n) = 2 · 2·16·8           =  512
//   wq_a       2·d·qL   = 2·8·4                              =   64
//   wq_b       2·qL·H·D = 2·4·2·32                           =  512
//   wkv        2·d·D    = 2·8·32                             =  512
//   wo_a       2·H·D·R  = 2·2·32·4                           =  512
//   wo_b       2·G·R·d  = 2·2·4·8                            =  128
//   gate       2·d·E    = 2·8·2                              =   32
//   experts    (k+1)·3·2·d·I = 2·3·2·8·4                     =  384
//                                                    total  = 2656
const SHARED = 2656;
// KV source compressor: ratio 2 → wkv + wgate = 2·(2·8·32) = 1024; ratio 1 → 512
// index source: wq_b 2·qL·hI·dI = 2·4·2·32 = 512, weights_proj 2·d·hI = 32 → 544
// per compressed entry: wk 2·D·dI = 2·32·32 = 2048
// attention per key: 4·H·D = 256; indexer score per visible entry: 2·hI·dI = 128
// head: 2·d·V = 256

describe('flops: per-token dense terms', () => {
  it('matches hand arithmetic for SWA, ratio-2 and ratio-1 Full layers', () => {
    assert.equal(denseLayerFlopsPerToken(config, L0!), SHARED);
    assert.equal(denseLayerFlopsPerToken(config, L1!), SHARED + 1024 + 544);
    assert.equal(denseLayerFlopsPerToken(config, L2!), SHARED + 512 + 544);
    assert.equal(headFlops(config), 256);
  });

  it('counts window keys from the window start and top-k of the visible compressed entries', () => {
    // ratio 2, t = 0: 1 window key, ⌊1/2⌋ = 0 entries
    assert.equal(attendedKeys(config, 2, 0, 0), 1);
    // ratio 2, t = 5: min(2, 6) = 2 window keys, min(1, 3) = 1 entry
    assert.equal(attendedKeys(config, 2, 5, 0), 3);
    // SWA, t = 5 replayed from 5: 1 window key only
    assert.equal(attendedKeys(config, 0, 5, 5), 1);
  });
});

describe('flops: whole calls', () => {
  it('exact prefill of 4 tokens', () => {
    // layer 0 (SWA): 4·2656 + attention 256·(1+2+2+2 = 7 keys)                       = 10624 + 1792 = 12416
    // layer 1 (ratio 2): 4·(2656+1568) = 16896
    //   keys t=0..3: window 1,2,2,2 + entries min(1, ⌊(t+1)/2⌋) = 0,1,1,1 → 10 keys → 2560
    //   scores: visible 0,1,1,2 = 4 → 512; entries completed: 2 → 4096          → 16896+2560+512+4096 = 24064
    // layer 2 (ratio 1): 4·(2656+1056) = 14848
    //   keys: window 1,2,2,2 + entries min(1, t+1) = 1,1,1,1 → 11 → 2816
    //   scores: visible 1,2,3,4 = 10 → 1280; entries completed: 4 → 8192         → 14848+2816+1280+8192 = 27136
    // head 256                                                                    total = 63872
    assert.equal(exactPrefillFlops(config, plan, 4), 63872);
  });

  it('encode of 4 tokens: layers 0..1, then layer 2 compressor projection and index keys', () => {
    // 12416 + 24064 + layer 2: wkv 4·512 = 2048, wk 4 entries·2048 = 8192 → 46720 (no head)
    assert.equal(plan.decoderStart, 2);
    assert.equal(encodeFlops(config, plan, 4), 46720);
  });

  it('decoder replay of the last 2 of 4 tokens reuses their compressed entries', () => {
    // layer 2 only, t = 2, 3, window rebuilt from 2: 2·3712 = 7424
    //   keys: window 1,2 + entries 1,1 = 5 → 1280; scores: visible 3,4 = 7 → 896; no new entries
    // head 256                                          → 7424+1280+896+256 = 9856
    assert.equal(decoderReplayFlops(config, plan, 4, 2), 9856);
  });

  it('a decode step at position 4 (the 5th token)', () => {
    // layer 0: 2656 + 256·2 keys = 3168
    // layer 1: 4224 + keys (2 + min(1, ⌊5/2⌋ = 2) = 1) 3 → 768, scores 2 → 256, entries ⌊5/2⌋−⌊4/2⌋ = 0 → 5248
    // layer 2: 3712 + keys (2 + 1) → 768, scores 5 → 640, entries 1 → 2048   → 7168
    // head 256                                                                total = 15840
    assert.equal(decodeStepFlops(config, plan, 4), 15840);
  });

  it('spans add up: prefill of 4 = positions 0..1 + 2..3 (window from 0)', () => {
    const whole = spanFlops(config, plan, { start: 0, end: 4, layers: [0, 3], windowStart: 0 });
    const parts =
      spanFlops(config, plan, { start: 0, end: 2, layers: [0, 3], windowStart: 0 }) +
      spanFlops(config, plan, { start: 2, end: 4, layers: [0, 3], windowStart: 0 });
    assert.equal(whole, parts);
    assert.equal(whole + headFlops(config), exactPrefillFlops(config, plan, 4));
  });

  it('refuses layers outside the plan', () => {
    assert.throws(() => spanFlops(config, plan, { start: 0, end: 1, layers: [0, 4], windowStart: 0 }), /layer 3 is not in the plan/);
  });
});
