/**
 * @module tokenizer-thread
 * The worker-thread side of OffThreadTokenizer: loads the model's tokenizer once and answers
 * encode / chat-template requests.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { loadTokenizer } from '@csa2/core';
import type { TokenizerThreadData } from './tokenize-pool.js';

const port = parentPort;
if (port === null) throw new Error('tokenizer-thread must run in a worker thread');
const data = workerData as TokenizerThreadData;
const tokenizer = await loadTokenizer({ modelDir: data.modelDir, vocabSize: data.vocabSize });

port.on('message', (req: { id: number; op: 'encode'; text: string } | { id: number; op: 'chat'; messages: Parameters<typeof tokenizer.applyChatTemplate>[0] }) => {
  try {
    const ids = req.op === 'encode' ? tokenizer.encode(req.text) : tokenizer.applyChatTemplate(req.messages);
    port.postMessage({ id: req.id, ids });
  } catch (err) {
    port.postMessage({ id: req.id, error: err instanceof Error ? err.message : String(err) });
  }
});
