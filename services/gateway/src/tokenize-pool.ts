/**
 * @module tokenize-pool
 * Tokenization without blocking the event loop. Short texts (the usual prompt) are tokenized inline;
 * long ones (documents, long prompts: the DeepSeek-V3 tokenizer takes ~0.7 s per MB here) go to a
 * worker thread that holds its own copy of the tokenizer, so HTTP, SSE relays and probes keep
 * running. Results are identical either way (the same tokenizer code and files).
 */
import { Worker } from 'node:worker_threads';
import type { ChatMessage, Tokenizer } from '@csa2/core';

/** Texts up to this size are tokenized on the calling thread. @defaultValue 64 KiB */
export const INLINE_TOKENIZE_MAX_BYTES = 64 * 1024;

export interface TokenizerThreadData {
  readonly modelDir: string;
  readonly vocabSize: number;
}

type Request = { id: number; op: 'encode'; text: string } | { id: number; op: 'chat'; messages: ChatMessage[] };
type Reply = { id: number; ids: number[] } | { id: number; error: string };

export class OffThreadTokenizer {
  private worker: Worker | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve(ids: number[]): void; reject(err: Error): void }>();

  constructor(
    readonly tokenizer: Tokenizer,
    private readonly data: TokenizerThreadData,
    private readonly inlineMaxBytes = INLINE_TOKENIZE_MAX_BYTES,
  ) {}

  /** `tokenizer.encode(text)`, off the event loop when the text is long. */
  encode(text: string): Promise<number[]> {
    if (Buffer.byteLength(text) <= this.inlineMaxBytes) return Promise.resolve(this.tokenizer.encode(text));
    return this.call({ id: 0, op: 'encode', text });
  }

  /** `tokenizer.applyChatTemplate(messages)`, off the event loop when the messages are long. */
  applyChatTemplate(messages: readonly ChatMessage[]): Promise<number[]> {
    const bytes = messages.reduce((a, m) => a + Buffer.byteLength(m.content), 0);
    if (bytes <= this.inlineMaxBytes) return Promise.resolve(this.tokenizer.applyChatTemplate(messages));
    return this.call({ id: 0, op: 'chat', messages: [...messages] });
  }

  private thread(): Worker {
    if (this.worker !== null) return this.worker;
    const worker = new Worker(new URL('./tokenizer-thread.js', import.meta.url), { workerData: this.data });
    worker.unref();
    worker.on('message', (reply: Reply) => {
      const p = this.pending.get(reply.id);
      if (p === undefined) return;
      this.pending.delete(reply.id);
      if ('error' in reply) p.reject(new Error(reply.error));
      else p.resolve(reply.ids);
    });
    const failAll = (reason: string) => {
      this.worker = null;
      for (const p of this.pending.values()) p.reject(new Error(reason));
      this.pending.clear();
    };
    worker.on('error', (err) => failAll(`tokenizer thread failed: ${err.message}`));
    worker.on('exit', (code) => failAll(`tokenizer thread exited (code ${code})`));
    this.worker = worker;
    return worker;
  }

  private call(req: Request): Promise<number[]> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.thread().postMessage({ ...req, id });
    });
  }

  async close(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    if (w !== null) await w.terminate();
  }
}
