/**
 * @module stop-matcher
 * Stop sequences on streamed text: holds back text that might be the start of a stop sequence, and
 * reports where one begins (the text is cut before it, as OpenAI does).
 */
import { InputError } from '@csa2/core';

/** Holds back text that might be the start of a stop sequence; reports where a stop sequence begins. */
export class StopMatcher {
  private pending = '';
  private readonly longest: number;

  constructor(private readonly stops: readonly string[]) {
    for (const s of stops) if (typeof s !== 'string' || s.length === 0) throw new InputError('stop sequences must be non-empty strings');
    this.longest = Math.max(0, ...stops.map((s) => s.length));
  }

  /** Feeds new text; returns the text safe to emit now and whether a stop sequence was hit. */
  push(text: string): { emit: string; stopped: boolean } {
    if (this.stops.length === 0) return { emit: text, stopped: false };
    this.pending += text;
    let cut = -1;
    for (const s of this.stops) {
      const at = this.pending.indexOf(s);
      if (at >= 0 && (cut < 0 || at < cut)) cut = at;
    }
    if (cut >= 0) {
      const emit = this.pending.slice(0, cut);
      this.pending = '';
      return { emit, stopped: true };
    }
    // keep the longest suffix that is a proper prefix of some stop sequence
    let keep = 0;
    for (let k = Math.min(this.longest - 1, this.pending.length); k > 0; k--) {
      const tail = this.pending.slice(this.pending.length - k);
      if (this.stops.some((s) => s.startsWith(tail))) {
        keep = k;
        break;
      }
    }
    const emit = this.pending.slice(0, this.pending.length - keep);
    this.pending = this.pending.slice(this.pending.length - keep);
    return { emit, stopped: false };
  }

  flush(): string {
    const rest = this.pending;
    this.pending = '';
    return rest;
  }
}
