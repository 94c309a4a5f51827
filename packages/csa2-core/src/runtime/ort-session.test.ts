/**
 * The CUDA runtime's checks that run without a GPU: a missing provider is one clear error naming the
 * libraries and how to install them; TF32 is turned off through the environment before CUDA starts;
 * a bad device id is refused.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GraphBuilder } from '../onnx/graph-builder.js';
import { CUDA_PROVIDER_LIBRARIES, DEFAULT_RUNTIME_OPTIONS, applyCudaEnvironment, checkCudaProviderInstalled, openGraphSession } from './ort-session.js';

test('a binding folder without the CUDA provider: config-invalid naming each missing library and how to install it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'csa2-ort-'));
  try {
    assert.throws(
      () => checkCudaProviderInstalled(dir),
      (e: Error & { code?: string }) =>
        e.code === 'config-invalid' && CUDA_PROVIDER_LIBRARIES.every((l) => e.message.includes(l)) && /ONNXRUNTIME_NODE_INSTALL=cuda12/.test(e.message),
    );
    writeFileSync(join(dir, 'libonnxruntime_providers_shared.so'), '');
    assert.throws(
      () => checkCudaProviderInstalled(dir),
      (e: Error) => e.message.includes('libonnxruntime_providers_cuda.so is missing') && !e.message.includes('shared.so'),
    );
    writeFileSync(join(dir, 'libonnxruntime_providers_cuda.so'), '');
    assert.doesNotThrow(() => checkCudaProviderInstalled(dir));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('opening a graph on cuda where the provider is not installed fails with that error, not an onnxruntime stack', async (t) => {
  try {
    checkCudaProviderInstalled();
    t.diagnostic('this machine has the CUDA provider installed: the GPU suite covers it');
    return;
  } catch {
    // the expected case on a machine without it (CI)
  }
  const g = new GraphBuilder('identity');
  g.output(g.op('Identity', [g.input('x', 'float32', [1])]), 'y', 'float32', [1]);
  await assert.rejects(
    openGraphSession('identity', g.toBytes(), { ...DEFAULT_RUNTIME_OPTIONS, executionProvider: 'cuda' }),
    (e: Error & { code?: string }) => e.code === 'config-invalid' && /CUDA execution provider is not installed/.test(e.message),
  );
});

test('TF32 is off unless asked for: NVIDIA_TF32_OVERRIDE=0 set on the main thread before a CUDA session, an explicit value kept', () => {
  const before = process.env['NVIDIA_TF32_OVERRIDE'];
  try {
    delete process.env['NVIDIA_TF32_OVERRIDE'];
    assert.equal(applyCudaEnvironment({ executionProvider: 'cpu', tf32: false }), true);
    assert.equal(process.env['NVIDIA_TF32_OVERRIDE'], undefined, 'the CPU provider leaves the environment alone');
    assert.equal(applyCudaEnvironment({ executionProvider: 'cuda', tf32: true }), false);
    assert.equal(process.env['NVIDIA_TF32_OVERRIDE'], undefined);
    assert.equal(applyCudaEnvironment({ executionProvider: 'cuda', tf32: false }), true);
    assert.equal(process.env['NVIDIA_TF32_OVERRIDE'], '0');
    process.env['NVIDIA_TF32_OVERRIDE'] = '1';
    assert.equal(applyCudaEnvironment({ executionProvider: 'cuda', tf32: false }), false, 'an explicit setting wins, and is reported');
  } finally {
    if (before === undefined) delete process.env['NVIDIA_TF32_OVERRIDE'];
    else process.env['NVIDIA_TF32_OVERRIDE'] = before;
  }
});

test('a negative or fractional device id is refused before any provider is loaded', async () => {
  const g = new GraphBuilder('identity');
  g.output(g.op('Identity', [g.input('x', 'float32', [1])]), 'y', 'float32', [1]);
  for (const deviceId of [-1, 0.5]) {
    await assert.rejects(
      openGraphSession('identity', g.toBytes(), { ...DEFAULT_RUNTIME_OPTIONS, executionProvider: 'cuda', deviceId }),
      (e: Error & { code?: string }) => e.code === 'config-invalid' && /deviceId/.test(e.message),
    );
  }
});
