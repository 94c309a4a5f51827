/**
 * @module tokenizer-thread
 * The worker-thread side of OffThreadTokenizer: loads the model's tokenizer once and answers
 * encode / chat-template requests under their token limit (tokenizeWithin).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { loadTokenizer } from '@csa2/core';
import { tokenizeWithin, type TokenizeReply, type TokenizeRequest, type TokenizerThreadData } from './tokenize-pool.js';

const port = parentPort;
if (port === null) throw new Error('tokenizer-thread must run in a worker thread');
const data = workerData as TokenizerThreadData;
const tokenizer = await loadTokenizer({ modelDir: data.modelDir, vocabSize: data.vocabSize });

port.on('message', (req: TokenizeRequest) => {
  const reply = (r: TokenizeReply): void => port.postMessage(r);
  try {
    reply({ id: req.id, ...tokenizeWithin(tokenizer, req) });
  } catch (err) {
    reply({ id: req.id, error: err instanceof Error ? err.message : String(err) });
  }
});
