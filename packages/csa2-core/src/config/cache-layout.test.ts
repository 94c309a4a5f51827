import { test } from 'node:test';
import assert from 'node:assert/strict';
import { globalCacheBytes, globalCacheBytesPerToken, indexKRowBytes, mainKvRowBytes, windowCacheBytes, windowKvRowBytes } from './cache-layout.js';
import { buildLayerPlan } from './layer-plan.js';
import { readModelConfigFile } from './model-config.js';
import { fixturesRoot } from '../testing/fixtures.js';

const FIXTURES = fixturesRoot();

test('the released config: 288 B main-KV rows, 68 B index-K rows, 528 B window rows, 890 B per token', async () => {
  const config = await readModelConfigFile(`${FIXTURES}/deepseek-v41-flash/config.json`);
  const plan = buildLayerPlan(config);
  assert.equal(mainKvRowBytes(config), 288);
  assert.equal(indexKRowBytes(config), 68);
  assert.equal(windowKvRowBytes(config), 528);
  assert.equal(globalCacheBytesPerToken(config, plan), 890);
  assert.equal(globalCacheBytesPerToken(config, plan), (3 * (288 + 68)) / 2 + 356);
  // 1000 tokens: 3 ratio-2 sources x 500 rows + 1 ratio-1 source x 1000 rows, 356 B each
  assert.equal(globalCacheBytes(config, plan, 1000), (3 * 500 + 1000) * 356);
  assert.equal(globalCacheBytes(config, plan, 1001), (3 * 500 + 1001) * 356);
  assert.equal(windowCacheBytes(config), 40 * 128 * 528);
});

test('tiny-a: rows computed by hand', async () => {
  const config = await readModelConfigFile(`${FIXTURES}/deepseek-v41-tiny-a/config.json`);
  const plan = buildLayerPlan(config);
  // head_dim 64: 32 B of FP4 + 4 E4M3 scales; index_head_dim 32: 16 B of FP4 + 1 UE8M0 scale
  assert.equal(mainKvRowBytes(config), 36);
  assert.equal(indexKRowBytes(config), 17);
  assert.equal(windowKvRowBytes(config), 66);
  // KV sources: layer 1 (ratio 2) and layer 3 (ratio 1): 53 / 2 + 53
  assert.equal(globalCacheBytesPerToken(config, plan), 79.5);
  // the 64 positions of the golden run: 32 + 64 rows, as in cache.layer1.* [32, ...] and cache.layer3.* [64, ...]
  assert.equal(globalCacheBytes(config, plan, 64), (32 + 64) * 53);
});
