/**
 * @module sse
 * Server-sent events framed as OpenAI frames them: every event is one `data: <json>\n\n`, the
 * stream ends with `data: [DONE]\n\n`; an error after the stream began is a `data: {"error":…}`
 * event (the official client raises it) and the stream then ends without [DONE]. While nothing is
 * sent for `keepaliveMs`, an SSE comment line (`: keep-alive`) keeps proxies from cutting the
 * connection; clients ignore comments. `comment(text)` sends other comment lines (the relay's
 * progress reports while a stream waits).
 */

export const SSE_HEADERS: Readonly<Record<string, string>> = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
};

/** One SSE data event carrying `value` as JSON. */
export function sseData(value: unknown): string {
  return `data: ${JSON.stringify(value)}\n\n`;
}

export const SSE_DONE = 'data: [DONE]\n\n';
export const SSE_KEEPALIVE = ': keep-alive\n\n';

export interface SseWriter {
  /** The response carrying the stream (status 200, SSE headers). */
  readonly response: Response;
  /** True once the client went away or `close` was called; writes are then dropped. */
  readonly closed: boolean;
  send(value: unknown): void;
  /** An SSE comment line (`: <text>`; `text` on one line): clients ignore it, people and proxies see it. */
  comment(text: string): void;
  done(): void;
  close(): void;
  /** Called once when the client cancels the stream (disconnect); not called after `close`. */
  onCancel(listener: () => void): void;
}

/**
 * An SSE response whose events are pushed by the caller.
 * @example
 * const sse = createSseWriter({ keepaliveMs: 15_000 });
 * sse.onCancel(() => cancelJob());
 * void pump(sse); // sse.send(chunk) … sse.done(); sse.close();
 * return sse.response;
 */
export function createSseWriter(options: { keepaliveMs: number; headers?: Readonly<Record<string, string>> }): SseWriter {
  const encoder = new TextEncoder();
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  let closed = false;
  let lastWriteMs = Date.now();
  const cancelListeners: (() => void)[] = [];
  const keepalive = setInterval(
    () => {
      if (Date.now() - lastWriteMs >= options.keepaliveMs) write(SSE_KEEPALIVE);
    },
    Math.max(50, Math.floor(options.keepaliveMs / 2)),
  );
  keepalive.unref();

  const stop = (): void => {
    closed = true;
    clearInterval(keepalive);
  };
  const write = (text: string): void => {
    if (closed || controller === undefined) return;
    lastWriteMs = Date.now();
    try {
      controller.enqueue(encoder.encode(text));
    } catch {
      stop();
    }
  };
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    cancel() {
      if (closed) return;
      stop();
      for (const listener of cancelListeners.splice(0)) listener();
    },
  });
  return {
    response: new Response(stream, { status: 200, headers: { ...SSE_HEADERS, ...options.headers } }),
    get closed() {
      return closed;
    },
    send: (value) => write(sseData(value)),
    comment: (text) => write(`: ${text.replace(/[\r\n]+/g, ' ')}\n\n`),
    done: () => write(SSE_DONE),
    close() {
      if (closed) return;
      stop();
      try {
        controller?.close();
      } catch {
        // already closed by a cancel
      }
    },
    onCancel(listener) {
      cancelListeners.push(listener);
    },
  };
}
