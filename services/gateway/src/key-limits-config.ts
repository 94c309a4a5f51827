/**
 * @module key-limits-config
 * Per-key limits and fair-share weights, configured with the keys themselves. An entry of
 * CSA2_API_KEYS is `key:tenant`, optionally followed by `;name=value` settings; CSA2_DEFAULT_KEY_LIMITS
 * holds the same settings (without a key) for every key that does not set them:
 *
 * | name | meaning | unset |
 * |---|---|---|
 * | `rpm` | requests per minute (completions and document POSTs) | unlimited |
 * | `tpm` | tokens per minute: a completion's prompt + max_tokens, a POST's document tokens | unlimited |
 * | `concurrency` | completions in flight at once | unlimited |
 * | `queued_documents` | documents queued or being encoded | unlimited |
 * | `weight` | share of prefill and decode time against other tenants (fair queuing) | 1 |
 *
 * @example
 * CSA2_API_KEYS='sk-big-1234567:acme;rpm=600;tpm=2000000;weight=4,sk-small-1234:beta;concurrency=2'
 * CSA2_DEFAULT_KEY_LIMITS='rpm=60;tpm=200000;concurrency=4;queued_documents=100'
 */
import { EnvConfigError, MAX_FAIR_WEIGHT, MIN_FAIR_WEIGHT } from '@csa2/jobs';

export interface KeyLimitSettings {
  readonly requestsPerMinute?: number;
  readonly tokensPerMinute?: number;
  readonly concurrentRequests?: number;
  readonly queuedDocuments?: number;
  readonly weight?: number;
}

/** The limits a key runs under (null: unlimited). */
export interface KeyLimits {
  readonly requestsPerMinute: number | null;
  readonly tokensPerMinute: number | null;
  readonly concurrentRequests: number | null;
  readonly queuedDocuments: number | null;
  readonly weight: number;
}

export const UNLIMITED: KeyLimits = { requestsPerMinute: null, tokensPerMinute: null, concurrentRequests: null, queuedDocuments: null, weight: 1 };

const COUNTS = { rpm: 'requestsPerMinute', tpm: 'tokensPerMinute', concurrency: 'concurrentRequests', queued_documents: 'queuedDocuments' } as const;

/**
 * Parses `name=value` settings separated by ';' (`where` names them in errors).
 * @throws EnvConfigError naming `variable` and the bad setting.
 */
export function parseKeyLimitSettings(text: string, variable: string, where: string): KeyLimitSettings {
  const out: Record<string, number> = {};
  for (const part of text
    .split(';')
    .map((p) => p.trim())
    .filter((p) => p !== '')) {
    const eq = part.indexOf('=');
    const name = eq > 0 ? part.slice(0, eq).trim() : part;
    const value = eq > 0 ? part.slice(eq + 1).trim() : '';
    if (name === 'weight') {
      const w = Number(value);
      if (!/^\d+(\.\d+)?$/.test(value) || !(w >= MIN_FAIR_WEIGHT && w <= MAX_FAIR_WEIGHT)) {
        throw new EnvConfigError(variable, `${where}: weight must be a number in [${MIN_FAIR_WEIGHT}, ${MAX_FAIR_WEIGHT}], got "${value}"`);
      }
      out['weight'] = w;
      continue;
    }
    const field = (COUNTS as Readonly<Record<string, string>>)[name];
    if (field === undefined) throw new EnvConfigError(variable, `${where}: unknown setting "${name}" (known: rpm, tpm, concurrency, queued_documents, weight)`);
    const n = Number(value);
    if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < 1)
      throw new EnvConfigError(variable, `${where}: ${name} must be a positive integer, got "${value}"`);
    if (field in out) throw new EnvConfigError(variable, `${where}: ${name} appears twice`);
    out[field] = n;
  }
  return out as KeyLimitSettings;
}

/** A key's settings over the defaults. */
export function resolveKeyLimits(settings: KeyLimitSettings | undefined, defaults: KeyLimitSettings): KeyLimits {
  const pick = (k: keyof Omit<KeyLimitSettings, 'weight'>): number | null => settings?.[k] ?? defaults[k] ?? null;
  return {
    requestsPerMinute: pick('requestsPerMinute'),
    tokensPerMinute: pick('tokensPerMinute'),
    concurrentRequests: pick('concurrentRequests'),
    queuedDocuments: pick('queuedDocuments'),
    weight: settings?.weight ?? defaults.weight ?? 1,
  };
}
