/**
 * @module host/engine-thread
 * The worker-thread side of EngineHost: opens an Engine from `workerData` and serves calls, streaming
 * events (tokens, progress) back. Calls run concurrently (they interleave at await points); an
 * `abort` message aborts the call's signal.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Engine, serializeError } from '../engine.js';
import { FlowControl } from '../flow-control.js';
import type { FromThread, ThreadData, ToThread } from './protocol.js';

const port = parentPort;
if (port === null) throw new Error('engine-thread must run in a worker thread');
const post = (m: FromThread) => port.postMessage(m);
const { options } = workerData as ThreadData;

let engine: Engine;
try {
  engine = await Engine.open(options);
  post({ type: 'ready', info: engine.info() });
} catch (err) {
  post({ type: 'open-failed', error: serializeError(err) });
  process.exit(0);
}

const running = new Map<number, AbortController>();
const flows = new Map<number, FlowControl>();

async function dispatch(id: number, method: string, args: unknown): Promise<unknown> {
  const signal = (running.get(id) as AbortController).signal;
  const onEvent = (event: unknown) => post({ type: 'event', id, event });
  switch (method) {
    case 'generate':
      return engine.generate(args as Parameters<Engine['generate']>[0], {
        signal,
        onToken: onEvent,
        onPromptLogprobs: (promptLogprobs) => onEvent({ promptLogprobs }),
        flow: flows.get(id) ?? new FlowControl(),
      });
    case 'ingest':
      return engine.ingest(args as Parameters<Engine['ingest']>[0], { signal, onProgress: onEvent });
    case 'stats':
      return engine.stats();
    case 'tokenize':
      return engine.tokenize(args as string);
    case 'detokenize':
      return engine.detokenize(args as number[]);
    default:
      throw new Error(`unknown engine method ${method}`);
  }
}

port.on('message', (msg: ToThread) => {
  if (msg.type === 'abort') {
    running.get(msg.id)?.abort();
    return;
  }
  if (msg.type === 'flow') {
    const flow = flows.get(msg.id);
    if (msg.paused) flow?.pause();
    else flow?.resume();
    return;
  }
  if (msg.type === 'close') {
    for (const c of running.values()) c.abort();
    void engine.close().finally(() => {
      post({ type: 'closed' });
      port.close();
    });
    return;
  }
  running.set(msg.id, new AbortController());
  if (msg.method === 'generate') flows.set(msg.id, new FlowControl());
  dispatch(msg.id, msg.method, msg.args)
    .then(
      (value) => post({ type: 'result', id: msg.id, value }),
      (err: unknown) => post({ type: 'error', id: msg.id, error: serializeError(err) }),
    )
    .finally(() => {
      running.delete(msg.id);
      flows.delete(msg.id);
    });
});
