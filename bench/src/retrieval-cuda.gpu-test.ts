/**
 * GPU test (`npm run test:gpu`): the served model's retrieval answers do not depend on the provider that
 * ingested the document. The retrieval bench's instances (every task, depth 0.5, seed 1) at 4K, 8K and
 * 16K tokens are ingested once on the CPU and once on CUDA (the graph encoder), and each question is
 * answered greedily by one CPU engine from either artifact (stored document, R = 128). The criterion,
 * fixed before any GPU result was seen: the generated texts identical for every instance. The lengths
 * can be narrowed with CSA2_GPU_RETRIEVAL_LENGTHS (token counts, comma-separated).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Engine } from '@csa2/engine';
import { instanceOfLength, type PreparedInstance } from './retrieval-bench.js';
import { RETRIEVAL_TASKS, answerCorrect, instanceSeed, loadRetrievalCorpus } from './retrieval-tasks.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SERVED = join(ROOT, 'models', 'v41-mini-128k');
const GREEDY = { temperature: 0, topP: 1, seed: 0 } as const;
const LENGTHS = (process.env['CSA2_GPU_RETRIEVAL_LENGTHS'] ?? '4096,8192,16384').split(',').map(Number);

test('retrieval answers from documents ingested on CUDA equal those ingested on the CPU (every task, 4K–16K)', async () => {
  assert.ok(
    LENGTHS.every((n) => Number.isInteger(n) && n > 0),
    'CSA2_GPU_RETRIEVAL_LENGTHS lists token counts',
  );
  const root = mkdtempSync(join(tmpdir(), 'csa2-gpu-retrieval-'));
  const corpus = loadRetrievalCorpus(join(ROOT, 'training', 'data', 'corpus'));
  const stores = { cpu: pathToFileURL(join(root, 'cpu')).href, cuda: pathToFileURL(join(root, 'cuda')).href };
  const cpu = await Engine.open({ modelDir: SERVED, store: stores.cpu });
  const cuda = await Engine.open({ modelDir: SERVED, store: stores.cuda, runtime: { executionProvider: 'cuda', cudaCpuFallback: 'refuse' } });
  const reader = await Engine.open({ modelDir: SERVED, store: stores.cuda });
  const cases: { id: string; p: PreparedInstance }[] = [];
  try {
    for (const length of LENGTHS)
      for (const task of RETRIEVAL_TASKS) {
        const p = instanceOfLength(cpu, corpus, task, length, 0.5, instanceSeed(1, task, length, 0.5, 0));
        const id = `${task}-${length}`;
        await cpu.ingest({ tenant: 't', documentId: id, tokenIds: p.docIds });
        await cuda.ingest({ tenant: 't', documentId: id, tokenIds: p.docIds });
        cases.push({ id, p });
      }
    const differ: string[] = [];
    let rightCpu = 0;
    let rightCuda = 0;
    for (const { id, p } of cases) {
      const ask = (engine: Engine) =>
        engine.generate({
          promptIds: p.questionIds,
          document: { tenant: 't', documentId: id },
          replayTokens: 128,
          maxTokens: p.answerTokens + 2,
          sampling: GREEDY,
        });
      const a = (await ask(cpu)).text;
      const b = (await ask(reader)).text;
      if (answerCorrect(p.instance, a)) rightCpu++;
      if (answerCorrect(p.instance, b)) rightCuda++;
      process.stdout.write(`# ${id}: CPU-ingested ${JSON.stringify(a)}, CUDA-ingested ${JSON.stringify(b)}\n`);
      if (a !== b) differ.push(`${id}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
    }
    process.stdout.write(`# correct: CPU-ingested ${rightCpu}/${cases.length}, CUDA-ingested ${rightCuda}/${cases.length}\n`);
    assert.deepEqual(differ, [], `answers differ between the CPU- and the CUDA-ingested documents`);
  } finally {
    await Promise.all([cpu.close(), cuda.close(), reader.close()]);
    rmSync(root, { recursive: true, force: true });
  }
});
