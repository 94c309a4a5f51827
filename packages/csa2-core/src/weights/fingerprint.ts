/**
 * @module weights/fingerprint
 * A stable identity for a checkpoint, used as the model id of cache artifacts: artifacts written with
 * one model are refused by another. Hashing hundreds of GB of weights at every start is not an option,
 * so the fingerprint covers config.json in full, and for each weight file its size, its whole
 * safetensors header (names, dtypes, shapes, offsets) and 16 samples of 4 KiB spread over the file.
 * Two checkpoints that differ only outside the samples would collide; any re-initialisation, retrain,
 * re-quantization or reshape changes it.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { open, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CheckpointError } from '../errors.js';

const SAMPLE_COUNT = 16;
const SAMPLE_BYTES = 4096;

async function hashFile(hash: ReturnType<typeof createHash>, path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    const size = (await fh.stat()).size;
    hash.update(`file:${size}:`);
    const lenBuf = Buffer.alloc(8);
    await fh.read(lenBuf, 0, 8, 0);
    const headerBytes = Number(lenBuf.readBigUInt64LE(0));
    if (headerBytes <= 0 || 8 + headerBytes > size)
      throw new CheckpointError(`${path}: not a safetensors file (header length ${headerBytes}, file size ${size})`);
    const header = Buffer.alloc(headerBytes);
    await fh.read(header, 0, headerBytes, 8);
    hash.update(header);
    const dataStart = 8 + headerBytes;
    const dataBytes = size - dataStart;
    const sample = Buffer.alloc(SAMPLE_BYTES);
    for (let i = 0; i < SAMPLE_COUNT; i++) {
      const offset = dataStart + Math.floor((dataBytes * i) / SAMPLE_COUNT);
      const { bytesRead } = await fh.read(sample, 0, Math.min(SAMPLE_BYTES, size - offset), offset);
      hash.update(sample.subarray(0, bytesRead));
    }
  } finally {
    await fh.close();
  }
}

/** A 32-hex-digit fingerprint of the checkpoint in `dir` (config.json + model.safetensors or its shards). */
export async function modelFingerprint(dir: string): Promise<string> {
  const hash = createHash('sha256');
  try {
    hash.update(await readFile(join(dir, 'config.json')));
  } catch (cause) {
    throw new CheckpointError(`${join(dir, 'config.json')}: cannot be read: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
  const single = join(dir, 'model.safetensors');
  let files: string[];
  if (existsSync(single)) files = ['model.safetensors'];
  else {
    const index = join(dir, 'model.safetensors.index.json');
    let map: Record<string, string>;
    try {
      map = (JSON.parse(await readFile(index, 'utf8')) as { weight_map: Record<string, string> }).weight_map;
    } catch (cause) {
      throw new CheckpointError(`${dir}: has neither model.safetensors nor a readable model.safetensors.index.json`, { cause });
    }
    files = [...new Set(Object.values(map))].sort();
  }
  for (const f of files) {
    hash.update(`name:${f}:`);
    await hashFile(hash, join(dir, f));
  }
  return hash.digest('hex').slice(0, 32);
}
