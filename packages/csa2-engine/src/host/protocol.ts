/**
 * @module host/protocol
 * Messages between EngineHost (main thread) and the engine thread. Every call carries an id; a call
 * ends with exactly one `result` or `error`, after any number of `event`s.
 */
import type { EngineOptions, ModelInfo, SerializedError } from '../engine.js';

export type EngineMethod = 'generate' | 'ingest' | 'tokenize' | 'detokenize' | 'stats';

export type ToThread =
  | { readonly type: 'call'; readonly id: number; readonly method: EngineMethod; readonly args: unknown }
  | { readonly type: 'abort'; readonly id: number }
  /** Flow control of a generate call (GenerateHooks.flow). */
  | { readonly type: 'flow'; readonly id: number; readonly paused: boolean }
  | { readonly type: 'close' };

export type FromThread =
  | { readonly type: 'ready'; readonly info: ModelInfo }
  | { readonly type: 'open-failed'; readonly error: SerializedError }
  | { readonly type: 'event'; readonly id: number; readonly event: unknown }
  | { readonly type: 'result'; readonly id: number; readonly value: unknown }
  | { readonly type: 'error'; readonly id: number; readonly error: SerializedError }
  | { readonly type: 'closed' };

export interface ThreadData {
  readonly options: EngineOptions;
}
