/**
 * @module sortable-ids
 * The parts of ids that sort by creation time (files and batches): 9 base-36 digits of the creation
 * time in ms, then 15 base64url characters, random or derived from a seed.
 */
import { createHash, randomBytes } from 'node:crypto';

const TIME_DIGITS = 9;

export function timePart(ms: number): string {
  return Math.max(0, Math.floor(ms)).toString(36).padStart(TIME_DIGITS, '0');
}

export function randomPart(): string {
  return randomBytes(12).toString('base64url').slice(0, 15);
}

export function derivedPart(seed: string): string {
  return createHash('sha256').update(seed).digest('base64url').slice(0, 15);
}
