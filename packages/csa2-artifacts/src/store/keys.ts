/**
 * @module store/keys
 * Validation of object keys, list prefixes and byte ranges, shared by every ObjectStore backend so that both
 * refuse exactly the same keys. The rules (see store/object-store):
 *
 * - a key is one or more '/'-separated segments;
 * - a segment is non-empty, is neither '.' nor '..', and uses only [A-Za-z0-9._=-];
 * - so no leading or trailing '/', no '//', no spaces, no non-ASCII characters.
 *
 * Two limits keep every key storable on every backend: a key is at most {@link MAX_KEY_CHARS}
 * characters (S3 allows 1024 bytes for the whole key, store prefix included) and a segment at
 * most {@link MAX_SEGMENT_CHARS}: a file name is at most 255 bytes on common filesystems, and
 * file-backed S3 servers add suffixes to it (s3rver stores 'k' as 'k._S3rver_object' and crashes
 * on a 241-character segment).
 *
 * Because the key alphabet has no '#' or '~', backends may name their own files and objects
 * (temporary files, probes) with those characters: such names can never collide with a key, and
 * listings skip them.
 */
import { InvalidKeyError } from '../errors.js';
import type { ByteRange, ListOptions } from './object-store.js';

/** Longest key, in characters (= bytes: keys are ASCII). */
export const MAX_KEY_CHARS = 1024;
/** Longest segment of a key, in characters (room for a backend's suffix within a 255-byte file name). */
export const MAX_SEGMENT_CHARS = 200;

const SEGMENT_CHARS = /^[A-Za-z0-9._=-]+$/;

/** Why `segment` is not a valid key segment, or null when it is. */
export function segmentProblem(segment: string): string | null {
  if (segment.length === 0) return 'empty segment (leading, trailing or doubled "/")';
  if (segment === '.' || segment === '..') return `"${segment}" segment`;
  if (segment.length > MAX_SEGMENT_CHARS) return `segment longer than ${MAX_SEGMENT_CHARS} characters`;
  if (!SEGMENT_CHARS.test(segment)) {
    const bad = [...segment].find((ch) => !SEGMENT_CHARS.test(ch)) ?? '?';
    return `character ${JSON.stringify(bad)} (U+${(bad.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, '0')}) outside [A-Za-z0-9._=/-]`;
  }
  return null;
}

/** Why `key` is not a valid key, or null when it is. */
export function keyProblem(key: string): string | null {
  if (key.length === 0) return 'empty key';
  if (key.length > MAX_KEY_CHARS) return `longer than ${MAX_KEY_CHARS} characters`;
  if (key.startsWith('/')) return 'absolute (leading "/")';
  for (const segment of key.split('/')) {
    const problem = segmentProblem(segment);
    if (problem !== null) return problem;
  }
  return null;
}

/** True when `key` follows the key rules. */
export function isValidKey(key: string): boolean {
  return keyProblem(key) === null;
}

/**
 * Checks `key` against the key rules and returns its segments.
 * @throws InvalidKeyError naming the first rule it breaks.
 * @example validateKey('chunks/ab12') // ['chunks', 'ab12']
 */
export function validateKey(key: string): string[] {
  const problem = keyProblem(key);
  if (problem !== null) throw new InvalidKeyError(key, problem);
  return key.split('/');
}

/**
 * Checks a list prefix: '' (everything), or the start of some valid key — whole segments followed
 * by '/' and possibly the start of a segment ('chunks/', 'chunks/ab', 'manifests/t1/doc').
 * @throws InvalidKeyError naming the problem.
 */
export function validatePrefix(prefix: string): void {
  if (prefix === '') return;
  const problem = prefixProblem(prefix);
  if (problem !== null) throw new InvalidKeyError(prefix, `as a list prefix: ${problem}`);
}

function prefixProblem(prefix: string): string | null {
  if (prefix.length > MAX_KEY_CHARS) return `longer than ${MAX_KEY_CHARS} characters`;
  if (prefix.startsWith('/')) return 'absolute (leading "/")';
  const segments = prefix.split('/');
  // The last part is '' (prefix ends with '/') or the start of a segment, which may be '.' or '..'
  // (the start of '.x' or '..x'); every part before it must be a whole valid segment.
  const last = segments.pop() ?? '';
  for (const segment of segments) {
    const problem = segmentProblem(segment);
    if (problem !== null) return problem;
  }
  if (last === '' || last === '.' || last === '..') return null;
  return segmentProblem(last);
}

/**
 * Checks a ByteRange's shape (non-negative safe integers); the bounds against the object's size
 * are the backend's to check.
 * @throws RangeError
 */
export function checkRange(range: ByteRange): void {
  if (!Number.isSafeInteger(range.offset) || range.offset < 0) throw new RangeError(`range offset must be a non-negative integer, got ${range.offset}`);
  if (!Number.isSafeInteger(range.length) || range.length < 0) throw new RangeError(`range length must be a non-negative integer, got ${range.length}`);
}

/**
 * Checks ListOptions (a string `startAfter`, a non-negative integer `limit`) and returns the limit
 * (Infinity when none).
 * @throws RangeError
 */
export function checkListOptions(options: ListOptions): number {
  if (options.startAfter !== undefined && typeof options.startAfter !== 'string') throw new RangeError('list startAfter must be a string');
  if (options.limit === undefined) return Infinity;
  if (!Number.isSafeInteger(options.limit) || options.limit < 0) throw new RangeError(`list limit must be a non-negative integer, got ${options.limit}`);
  return options.limit;
}
