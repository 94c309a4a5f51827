import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointError, ConfigError, UnsupportedFeatureError } from '../errors.js';
import { buildLayerPlan } from '../config/layer-plan.js';
import { readModelConfigFile } from '../config/model-config.js';
import { expectedTensors, loadCheckpoint } from './checkpoint.js';
import { openSafetensors, writeSafetensors } from './safetensors.js';
import type { TensorEntry } from './safetensors.js';
import { fixturesRoot } from '../testing/fixtures.js';

const TINY_A = join(fixturesRoot(), 'deepseek-v41-tiny-a');
const RELEASED = join(fixturesRoot(), 'deepseek-v41-flash/config.json');

/** Every tensor of the tiny-a model file, as raw entries that can be written back. */
function fixtureEntries(): TensorEntry[] {
  const file = openSafetensors(`${TINY_A}/model.safetensors`);
  try {
    return [...file.tensors.values()].map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: file.readTensorRaw(t.name) }));
  } finally {
    file.close();
  }
}

async function withCheckpointDir(entries: TensorEntry[], fn: (dir: string) => Promise<void>, config?: Record<string, unknown>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'csa2-ckpt-'));
  try {
    if (config === undefined) await copyFile(`${TINY_A}/config.json`, join(dir, 'config.json'));
    else await writeFile(join(dir, 'config.json'), JSON.stringify(config));
    await writeSafetensors(join(dir, 'model.safetensors'), entries, { format: 'pt' });
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test('expectedTensors matches the names, shapes and dtypes of the tiny-a fixture exactly', async () => {
  const config = await readModelConfigFile(`${TINY_A}/config.json`);
  const expected = expectedTensors(config, buildLayerPlan(config));
  const file = openSafetensors(`${TINY_A}/model.safetensors`);
  try {
    assert.deepEqual([...expected.keys()].sort(), [...file.tensors.keys()].sort());
    for (const [name, want] of expected) {
      const info = file.info(name);
      assert.deepEqual(info.shape, want.shape, name);
      assert.equal(info.dtype, want.dtypes[0], `${name}: the reference storage dtype comes first`);
    }
  } finally {
    file.close();
  }
  assert.deepEqual(expected.get('layers.0.attn.wq_a.weight')?.shape, [32, 64]);
  assert.deepEqual(expected.get('layers.0.hc_attn_fn')?.shape, [24, 256]);
  assert.deepEqual(expected.get('layers.0.attn.wo_a.weight')?.shape, [32, 64]);
  assert.ok(expected.has('layers.1.attn.compressor.wgate.weight'));
  assert.ok(!expected.has('layers.3.attn.compressor.wgate.weight'), 'ratio-1 compressors have no gate');
  assert.ok(expected.has('layers.5.attn.indexer.wq_b.weight') && !expected.has('layers.5.attn.indexer.wk.weight'));
});

test('the released schedule has the documented per-role tensor counts', async () => {
  const config = await readModelConfigFile(RELEASED);
  const names = [...expectedTensors(config, buildLayerPlan(config)).keys()];
  const count = (suffix: string): number => names.filter((n) => n.endsWith(suffix)).length;
  assert.equal(count('attn.compressor.wkv.weight'), 4);
  assert.equal(count('attn.compressor.wgate.weight'), 3);
  assert.equal(count('attn.indexer.wq_b.weight'), 8);
  assert.equal(count('attn.indexer.wk.weight'), 4);
  assert.equal(count('.w1.weight'), 40 * (384 + 1));
});

test('loads the tiny-a checkpoint; tensors are widened exactly', async () => {
  const ckpt = await loadCheckpoint(TINY_A);
  try {
    assert.equal(ckpt.config.numLayers, 6);
    assert.equal(ckpt.plan.decoderStart, 3);
    assert.deepEqual(ckpt.unexpected, []);
    const wq = ckpt.tensor('layers.0.attn.wq_a.weight');
    assert.deepEqual(wq.shape, [32, 64]);
    assert.equal(wq.data.length, 32 * 64);
    // exact bf16 widening: the low 16 bits of each float32 are zero and the top 16 match the file
    const raw = new Uint16Array(fixtureEntries().find((e) => e.name === 'layers.0.attn.wq_a.weight')?.data.buffer ?? new ArrayBuffer(0));
    const bits = new Uint32Array(wq.data.buffer, wq.data.byteOffset, wq.data.length);
    assert.equal(raw.length, bits.length);
    assert.ok(bits.every((b, i) => b >>> 16 === raw[i] && (b & 0xffff) === 0));
    const sink = ckpt.tensor('layers.0.attn.attn_sink');
    assert.deepEqual(sink.shape, [2]);
    assert.ok(ckpt.has('head.weight'));
    assert.throws(
      () => ckpt.tensor('mtp.0.norm.weight'),
      (e: unknown) => e instanceof CheckpointError && e.tensor === 'mtp.0.norm.weight',
    );
  } finally {
    ckpt.close();
  }
});

test('a missing, mis-shaped or non-float tensor is a CheckpointError naming it', async () => {
  const all = fixtureEntries();
  const missingName = 'layers.3.attn.compressor.wkv.weight';
  await withCheckpointDir(
    all.filter((e) => e.name !== missingName),
    async (dir) => {
      await assert.rejects(loadCheckpoint(dir), (e: unknown) => {
        assert.ok(e instanceof CheckpointError);
        assert.equal(e.tensor, missingName);
        assert.match(e.message, /tensor "layers\.3\.attn\.compressor\.wkv\.weight" is missing \(expected shape \[64, 64\]\)/);
        return true;
      });
    },
  );
  const misName = 'layers.2.attn.wq_b.weight';
  const misShaped = all.map((e) => (e.name === misName ? { ...e, shape: [64, 64] } : e));
  await withCheckpointDir(misShaped, async (dir) => {
    await assert.rejects(loadCheckpoint(dir), (e: unknown) => {
      assert.ok(e instanceof CheckpointError);
      assert.equal(e.tensor, misName);
      assert.match(e.message, /has shape \[64, 64\], expected \[128, 32\]/);
      return true;
    });
  });
  const badDtype = all.map((e) => (e.name === 'norm.weight' ? { ...e, dtype: 'I16' as const } : e));
  await withCheckpointDir(badDtype, async (dir) => {
    await assert.rejects(loadCheckpoint(dir), (e: unknown) => e instanceof CheckpointError && e.tensor === 'norm.weight' && /dtype I16/.test(e.message));
  });
});

test('extra tensors are listed as unexpected, not refused', async () => {
  const extra: TensorEntry[] = [
    ...fixtureEntries(),
    { name: 'mtp.0.norm.weight', dtype: 'BF16', shape: [64], data: new Float32Array(64) },
    { name: 'layers.1.engram.q_weight', dtype: 'BF16', shape: [4, 64], data: new Float32Array(256) },
  ];
  await withCheckpointDir(extra, async (dir) => {
    const ckpt = await loadCheckpoint(dir);
    try {
      assert.deepEqual(ckpt.unexpected, ['layers.1.engram.q_weight', 'mtp.0.norm.weight']);
      assert.equal(ckpt.tensor('mtp.0.norm.weight').data.length, 64);
    } finally {
      ckpt.close();
    }
  });
});

test('a bad or unrunnable config is refused before any tensor is read', async () => {
  const base = JSON.parse(await readFile(`${TINY_A}/config.json`, 'utf8')) as Record<string, unknown>;
  const entries = fixtureEntries();
  await withCheckpointDir(
    entries,
    async (dir) => {
      await assert.rejects(loadCheckpoint(dir), (e: unknown) => e instanceof ConfigError && e.field === 'n_heads' && e.message.includes(dir));
    },
    { ...base, n_heads: 'x' },
  );
  await withCheckpointDir(
    entries,
    async (dir) => {
      await assert.rejects(loadCheckpoint(dir), (e: unknown) => e instanceof UnsupportedFeatureError && e.feature === 'dtype');
    },
    { ...base, dtype: 'fp8' },
  );
  await withCheckpointDir(
    entries,
    async (dir) => {
      await assert.rejects(loadCheckpoint(dir), (e: unknown) => e instanceof ConfigError && e.field === 'kv_source_layers');
    },
    { ...base, kv_source_layers: [3] },
  );
  await withCheckpointDir(entries, async (dir) => {
    await rm(join(dir, 'config.json'));
    await assert.rejects(loadCheckpoint(dir), (e: unknown) => e instanceof ConfigError && /config\.json/.test(e.message));
  });
});

test('a sharded checkpoint loads through model.safetensors.index.json', async () => {
  const entries = fixtureEntries();
  const dir = await mkdtemp(join(tmpdir(), 'csa2-ckpt-'));
  try {
    await copyFile(`${TINY_A}/config.json`, join(dir, 'config.json'));
    const half = Math.floor(entries.length / 2);
    const shards: Array<[string, TensorEntry[]]> = [
      ['model-00001-of-00002.safetensors', entries.slice(0, half)],
      ['model-00002-of-00002.safetensors', entries.slice(half)],
    ];
    const weightMap: Record<string, string> = {};
    for (const [file, part] of shards) {
      await writeSafetensors(join(dir, file), part);
      for (const e of part) weightMap[e.name] = file;
    }
    await writeFile(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: weightMap }));
    const ckpt = await loadCheckpoint(dir);
    try {
      const single = await loadCheckpoint(TINY_A);
      try {
        for (const name of ['embed.weight', 'head.weight', 'layers.5.attn.indexer.wq_b.weight']) {
          assert.deepEqual(ckpt.tensor(name).data, single.tensor(name).data, name);
        }
      } finally {
        single.close();
      }
    } finally {
      ckpt.close();
    }
    // an index entry pointing at the wrong shard
    const first = entries[0];
    assert.ok(first !== undefined);
    weightMap[first.name] = 'model-00002-of-00002.safetensors';
    await writeFile(join(dir, 'model.safetensors.index.json'), JSON.stringify({ weight_map: weightMap }));
    await assert.rejects(
      loadCheckpoint(dir),
      (e: unknown) => e instanceof CheckpointError && e.tensor === first.name && /not present in the shard/.test(e.message),
    );
    await writeFile(join(dir, 'model.safetensors.index.json'), JSON.stringify({ weight_map: { [first.name]: '../escape.safetensors' } }));
    await assert.rejects(loadCheckpoint(dir), (e: unknown) => e instanceof CheckpointError && /not a file name inside the directory/.test(e.message));
    await rm(join(dir, 'model.safetensors.index.json'));
    await assert.rejects(loadCheckpoint(dir), (e: unknown) => e instanceof CheckpointError && /has neither model\.safetensors nor/.test(e.message));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
