/**
 * @module tokenize-pool
 * Tokenization without blocking the event loop. Short texts (the usual prompt) are tokenized inline;
 * long ones (documents, long prompts: the DeepSeek-V3 tokenizer takes ~0.7 s per MB here) go to a
 * worker thread that holds its own copy of the tokenizer, so HTTP, SSE relays and probes keep
 * running. Results are identical either way (the same tokenizer code and files).
 *
 * Every call takes the caller's token limit: a text over it is refused with TokenLimitError before
 * it is tokenized when its byte length alone shows it (@csa2/core encodeWithin), or as soon as the
 * tokens encoded so far exceed it, and its ids are never built or copied back. There is one thread,
 * so tokenization runs one text at a time; how many texts wait for it is bounded by the gateway's
 * body budget (middleware/body-budget).
 */
import { Worker } from 'node:worker_threads';
import { encodeWithin, minTokens, type ChatMessage, type Tokenizer } from '@csa2/core';

/** The text has more tokens than the caller's limit (at least `tokensAtLeast`). */
export class TokenLimitError extends Error {
  constructor(
    readonly tokensAtLeast: number,
    readonly maxTokens: number,
  ) {
    super(`at least ${tokensAtLeast} tokens, more than the limit of ${maxTokens}`);
    this.name = 'TokenLimitError';
  }
}

/** Texts up to this size are tokenized on the calling thread. @defaultValue 64 KiB */
export const INLINE_TOKENIZE_MAX_BYTES = 64 * 1024;

export interface TokenizerThreadData {
  readonly modelDir: string;
  readonly vocabSize: number;
}

/** One tokenization, with the caller's token limit. */
export type TokenizeWork = { op: 'encode'; text: string; maxTokens: number } | { op: 'chat'; messages: ChatMessage[]; maxTokens: number };
export type TokenizeRequest = TokenizeWork & { id: number };
export type TokenizeReply = { id: number; ids: number[] } | { id: number; tokensAtLeast: number } | { id: number; error: string };

/** What the thread (and the inline path) does with a request. */
export function tokenizeWithin(tokenizer: Tokenizer, req: TokenizeWork): { ids: number[] } | { tokensAtLeast: number } {
  if (req.op === 'encode') {
    const r = encodeWithin(tokenizer, req.text, req.maxTokens);
    return r.ok ? { ids: r.ids } : { tokensAtLeast: r.tokensAtLeast };
  }
  // the template adds little: its messages' own lower bound already says whether it can fit
  const atLeast = req.messages.reduce((n, m) => n + minTokens(tokenizer, m.content), 0);
  if (atLeast > req.maxTokens) return { tokensAtLeast: atLeast };
  const ids = tokenizer.applyChatTemplate(req.messages);
  return ids.length > req.maxTokens ? { tokensAtLeast: ids.length } : { ids };
}

export class OffThreadTokenizer {
  private worker: Worker | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve(ids: number[]): void; reject(err: Error): void; maxTokens: number }>();

  constructor(
    readonly tokenizer: Tokenizer,
    private readonly data: TokenizerThreadData,
    private readonly inlineMaxBytes = INLINE_TOKENIZE_MAX_BYTES,
  ) {}

  /**
   * `tokenizer.encode(text)`, off the event loop when the text is long; rejects with TokenLimitError
   * when it has more than `maxTokens` tokens (found without tokenizing it all).
   */
  encode(text: string, maxTokens: number = Number.MAX_SAFE_INTEGER): Promise<number[]> {
    if (Buffer.byteLength(text) <= this.inlineMaxBytes) return this.inline({ op: 'encode', text, maxTokens });
    // refused from its bytes alone here, without copying it to the thread or waiting for it there
    const atLeast = minTokens(this.tokenizer, text);
    if (atLeast > maxTokens) return Promise.reject(new TokenLimitError(atLeast, maxTokens));
    return this.call({ id: 0, op: 'encode', text, maxTokens });
  }

  /** `tokenizer.applyChatTemplate(messages)`, off the event loop when the messages are long; TokenLimitError past `maxTokens`. */
  applyChatTemplate(messages: readonly ChatMessage[], maxTokens: number = Number.MAX_SAFE_INTEGER): Promise<number[]> {
    const bytes = messages.reduce((a, m) => a + Buffer.byteLength(m.content), 0);
    if (bytes <= this.inlineMaxBytes) return this.inline({ op: 'chat', messages: [...messages], maxTokens });
    const atLeast = messages.reduce((n, m) => n + minTokens(this.tokenizer, m.content), 0);
    if (atLeast > maxTokens) return Promise.reject(new TokenLimitError(atLeast, maxTokens));
    return this.call({ id: 0, op: 'chat', messages: [...messages], maxTokens });
  }

  private inline(req: TokenizeWork): Promise<number[]> {
    try {
      const r = tokenizeWithin(this.tokenizer, req);
      return 'ids' in r ? Promise.resolve(r.ids) : Promise.reject(new TokenLimitError(r.tokensAtLeast, req.maxTokens));
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  private thread(): Worker {
    if (this.worker !== null) return this.worker;
    const worker = new Worker(new URL('./tokenizer-thread.js', import.meta.url), { workerData: this.data });
    worker.unref();
    worker.on('message', (reply: TokenizeReply) => {
      const p = this.pending.get(reply.id);
      if (p === undefined) return;
      this.pending.delete(reply.id);
      if ('error' in reply) p.reject(new Error(reply.error));
      else if ('tokensAtLeast' in reply) p.reject(new TokenLimitError(reply.tokensAtLeast, p.maxTokens));
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

  private call(req: TokenizeRequest): Promise<number[]> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, maxTokens: req.maxTokens });
      this.thread().postMessage({ ...req, id });
    });
  }

  async close(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    if (w !== null) await w.terminate();
  }
}
