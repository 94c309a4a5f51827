/**
 * @module api-client
 * What the fault and fairness benches send to a pipeline's gateway: streamed completions read event
 * by event (with the time of the first and last token), documents given as token ids and polled until
 * ready, and deterministic token ids. Plain fetch, no client library: the benches time the server.
 */

export interface StreamOutcome {
  readonly status: number;
  /** When the request was sent, its first token came and its stream ended (ms, performance.now()). */
  readonly sentAtMs: number;
  readonly firstTokenAtMs: number | null;
  readonly endedAtMs: number;
  readonly text: string;
  /** usage.completion_tokens of the final chunk; null when the stream had none. */
  readonly completionTokens: number | null;
  /** The stream ended with [DONE] and no error event. */
  readonly finished: boolean;
  readonly error: string | null;
  /** Token events received: text chunks, each counted once. */
  readonly tokenEvents: number;
  /** Times (ms) at which token events came. */
  readonly tokenTimesMs: readonly number[];
}

const headers = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });

/** A streamed completion (stream_options.include_usage on), read to its end. */
export async function streamCompletion(url: string, key: string, body: Record<string, unknown>, timeoutMs = 600_000): Promise<StreamOutcome> {
  const sentAtMs = performance.now();
  const tokenTimesMs: number[] = [];
  let text = '';
  let completionTokens: number | null = null;
  let finished = false;
  let error: string | null = null;
  let status = 0;
  try {
    const r = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: headers(key),
      body: JSON.stringify({ model: 'tiny', ...body, stream: true, stream_options: { include_usage: true } }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    status = r.status;
    if (!r.ok || r.body === null) {
      error = `${r.status} ${(await r.text()).slice(0, 200)}`;
    } else {
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let buffered = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffered += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffered.indexOf('\n\n')) >= 0) {
          const event = buffered.slice(0, cut);
          buffered = buffered.slice(cut + 2);
          if (!event.startsWith('data: ')) continue;
          const data = event.slice(6);
          if (data === '[DONE]') {
            finished = error === null;
            continue;
          }
          const chunk = JSON.parse(data) as { error?: { message?: string }; choices?: { text?: string }[]; usage?: { completion_tokens?: number } | null };
          if (chunk.error !== undefined) error = chunk.error.message ?? 'error';
          const piece = chunk.choices?.[0]?.text;
          if (typeof piece === 'string' && piece.length > 0) {
            text += piece;
            tokenTimesMs.push(performance.now());
          }
          if (typeof chunk.usage?.completion_tokens === 'number') completionTokens = chunk.usage.completion_tokens;
        }
      }
    }
  } catch (err) {
    error = err instanceof Error ? err.message : String(err);
  }
  return {
    status,
    sentAtMs,
    firstTokenAtMs: tokenTimesMs[0] ?? null,
    endedAtMs: performance.now(),
    text,
    completionTokens,
    finished,
    error,
    tokenEvents: tokenTimesMs.length,
    tokenTimesMs,
  };
}

/** A non-streamed completion: its status, text and time. */
export async function completion(
  url: string,
  key: string,
  body: Record<string, unknown>,
  timeoutMs = 600_000,
): Promise<{ status: number; ms: number; text: string; body: string }> {
  const t0 = performance.now();
  try {
    const r = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: headers(key),
      body: JSON.stringify({ model: 'tiny', ...body }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const raw = await r.text();
    let text = '';
    try {
      text = (JSON.parse(raw) as { choices?: { text?: string }[] }).choices?.[0]?.text ?? '';
    } catch {
      // not JSON: kept in body
    }
    return { status: r.status, ms: performance.now() - t0, text, body: raw.slice(0, 300) };
  } catch (err) {
    return { status: 0, ms: performance.now() - t0, text: '', body: err instanceof Error ? `${err.name}: ${err.message}` : String(err) };
  }
}

/** POST /v1/documents with the given documents ({ id, token_ids }); throws unless 202. */
export async function postDocuments(url: string, key: string, documents: readonly { id: string; tokenIds: readonly number[] }[]): Promise<void> {
  const body =
    documents.length === 1
      ? { id: documents[0]?.id, token_ids: documents[0]?.tokenIds }
      : { documents: documents.map((d) => ({ id: d.id, token_ids: d.tokenIds })) };
  const r = await fetch(`${url}/v1/documents`, { method: 'POST', headers: headers(key), body: JSON.stringify(body) });
  if (r.status !== 202) throw new Error(`POST /v1/documents: ${r.status} ${(await r.text()).slice(0, 300)}`);
  await r.text();
}

export interface DocumentStatus {
  readonly status: string;
  readonly tokensDone: number;
}

export async function documentStatus(url: string, key: string, id: string): Promise<DocumentStatus> {
  const r = await fetch(`${url}/v1/documents/${id}`, { headers: headers(key) });
  const body = (await r.json()) as { status?: string; progress?: { tokens_done?: number } };
  return { status: body.status ?? `http ${r.status}`, tokensDone: body.progress?.tokens_done ?? 0 };
}

/** Polls until every document is ready (or failed, or the time is up); the time (performance.now()) each became ready. */
export async function documentsReady(
  url: string,
  key: string,
  ids: readonly string[],
  timeoutMs: number,
  everyMs = 200,
): Promise<Map<string, number | 'failed' | 'timeout'>> {
  const out = new Map<string, number | 'failed' | 'timeout'>();
  const deadline = performance.now() + timeoutMs;
  while (out.size < ids.length) {
    for (const id of ids) {
      if (out.has(id)) continue;
      const s = await documentStatus(url, key, id);
      if (s.status === 'ready') out.set(id, performance.now());
      else if (s.status === 'failed') out.set(id, 'failed');
    }
    if (out.size === ids.length) break;
    if (performance.now() > deadline) {
      for (const id of ids) if (!out.has(id)) out.set(id, 'timeout');
      break;
    }
    await sleep(everyMs);
  }
  return out;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** `n` deterministic token ids in [lo, hi) from `seed` (an LCG; the same ids on every run). */
export function tokenIds(n: number, seed: number, lo = 3, hi = 4000): number[] {
  let x = (seed * 2654435761) % 2147483648;
  return Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return lo + (x % (hi - lo));
  });
}

/** Seconds with one decimal. */
export const secs = (ms: number): string => (ms / 1000).toFixed(1);
