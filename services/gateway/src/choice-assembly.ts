/**
 * @module choice-assembly
 * A request's choices put together from its streams' entries (relay.ts), one entry at a time, for the
 * SSE relay, the JSON body and batch lines alike (so all three answer the same text and logprobs):
 *
 * - each choice's text is its token entries' texts, then its final entry's tail text; with `echo`
 *   (completions) the prompt's text comes first, as a delta of its own before the choice's first
 *   token (every choice echoes it, as OpenAI answers);
 * - with logprobs, each token entry's `lp` becomes a TokenLogprobs record (its bytes from the
 *   tokenizer's tokenBytes); an echoed prompt's records come from the prompt entry that opens
 *   choice 0's stream (the decoder writes it before any token of any choice, and relay reads choice
 *   0's stream first, so it is here before any choice needs it). The echo leaves out the BOS the
 *   gateway added (`skipTokens`), so its first token's logprob, given that BOS, is a number; without
 *   an added BOS and without a document the first echoed token has none (null), as OpenAI answers;
 * - text offsets are in Unicode code points (as OpenAI and vLLM count them).
 *
 * An entry that contradicts the request (logprobs asked but absent: a decoder that predates them; a
 * prompt entry outside choice 0) is a 500 `stream_invalid`, never a silently wrong answer. Error
 * entries and cancelled finals are the caller's to handle.
 */
import type { Tokenizer } from '@csa2/core';
import type { PromptTokenEntry, StreamEntry, TokenAlternative, Usage } from '@csa2/jobs';
import { ApiError, publicMessage } from './errors.js';
import { toOpenAiUsage, type FinishReason, type OpenAiUsage } from './openai/usage.js';
import type { TokenCandidate, TokenLogprobs } from './openai/logprobs.js';

/** completions `echo`: the prompt is answered first; its first `skipTokens` ids (the BOS the gateway added) are not. */
export interface EchoSpec {
  readonly skipTokens: number;
}

/** What is new for one choice. */
export interface ChoiceDelta {
  readonly choice: number;
  /** New text ('' when the delta carries logprobs of tokens that released no text yet). */
  readonly text: string;
  /** This text's tokens with their logprobs (logprobs asked), else empty. */
  readonly tokens: readonly TokenLogprobs[];
  /** Where `text` starts in the choice's whole text (echo included), in code points. */
  readonly textOffset: number;
}

/** One choice once its stream ended. */
export interface AssembledChoice {
  readonly index: number;
  /** The whole text (echoed prompt first). */
  readonly text: string;
  readonly finishReason: FinishReason;
  /** Every token's logprobs in order (echoed prompt first; empty without logprobs). */
  readonly tokens: readonly TokenLogprobs[];
}

export interface ChoiceAssemblyOptions {
  readonly n: number;
  /** Token logprobs were asked (the entries must carry them). */
  readonly logprobs: boolean;
  readonly echo: EchoSpec | null;
  /** Prompt ids after the document (the decode job's whole prompt): what an echo answers. */
  readonly promptIds: readonly number[];
  readonly tokenizer: Pick<Tokenizer, 'tokenBytes' | 'createDecodeStream'>;
}

/** The entries an assembly takes (error entries are the caller's). */
export type AssemblyEntry = Extract<StreamEntry, { kind: 'token' | 'prompt' | 'final' }>;

interface ChoiceState {
  started: boolean;
  text: string;
  /** Code points of `text`. */
  chars: number;
  tokens: TokenLogprobs[];
  tokenCount: number;
  finishReason: FinishReason | null;
  usage: Usage | null;
}

function invalid(detail: string): ApiError {
  return new ApiError(500, publicMessage('stream-invalid'), { code: 'stream_invalid', detail });
}

const codePoints = (s: string): number => {
  let n = 0;
  for (const _ of s) n++;
  return n;
};

export class ChoiceAssembly {
  private readonly states: ChoiceState[];
  private promptLogprobs: readonly (PromptTokenEntry | null)[] | null = null;
  private echoed: { text: string; tokens: TokenLogprobs[] } | null = null;
  private open: number;

  constructor(private readonly options: ChoiceAssemblyOptions) {
    this.states = Array.from({ length: options.n }, () => ({ started: false, text: '', chars: 0, tokens: [], tokenCount: 0, finishReason: null, usage: null }));
    this.open = options.n;
  }

  /** True once every choice's final entry was pushed. */
  get done(): boolean {
    return this.open === 0;
  }

  /** Takes choice `choice`'s next entry; returns what is new. A final entry must not be 'cancelled' (the caller's). */
  push(choice: number, entry: AssemblyEntry): ChoiceDelta[] {
    const state = this.states[choice];
    if (state === undefined) throw invalid(`an entry of choice ${choice}, the request has ${this.options.n}`);
    if (entry.kind === 'prompt') {
      if (choice !== 0 || state.started) throw invalid(`a prompt entry in choice ${choice}'s stream after its start`);
      this.promptLogprobs = entry.logprobs;
      return [];
    }
    if (state.finishReason !== null) throw invalid(`an entry after the end of choice ${choice}`);
    const out: ChoiceDelta[] = [];
    if (!state.started) {
      state.started = true;
      if (this.options.echo !== null) {
        const echo = this.echo();
        out.push(this.add(choice, state, echo.text, echo.tokens));
      }
    }
    if (entry.kind === 'token') {
      state.tokenCount += 1;
      const tokens = this.options.logprobs ? [this.tokenLogprobs(entry)] : [];
      if (entry.text !== '' || tokens.length > 0) out.push(this.add(choice, state, entry.text, tokens));
      return out;
    }
    if (entry.finishReason === 'cancelled') throw invalid('a cancelled final entry reached the assembly');
    if (entry.text !== undefined && entry.text !== '') out.push(this.add(choice, state, entry.text, []));
    state.finishReason = entry.finishReason;
    state.usage = entry.usage;
    state.tokenCount = Math.max(state.tokenCount, entry.tokens);
    this.open -= 1;
    return out;
  }

  /** Whether choice `choice` has ended. */
  finished(choice: number): boolean {
    return this.states[choice]?.finishReason !== null;
  }

  /** The choices, in order (call once done). */
  choices(): AssembledChoice[] {
    return this.states.map((s, index) => ({ index, text: s.text, finishReason: s.finishReason ?? 'length', tokens: s.tokens }));
  }

  /**
   * The request's usage: the prompt counted once (choice 0's final, else `fallback.promptTokens`),
   * the choices' completion tokens summed.
   */
  usage(fallback: { readonly promptTokens: number }): OpenAiUsage {
    const first = this.states[0];
    const base = toOpenAiUsage(first?.usage, { promptTokens: fallback.promptTokens, completionTokens: first?.tokenCount ?? 0, cachedTokens: 0 });
    let completion = 0;
    for (const s of this.states)
      completion += toOpenAiUsage(s.usage, { promptTokens: base.prompt_tokens, completionTokens: s.tokenCount, cachedTokens: 0 }).completion_tokens;
    return { ...base, completion_tokens: completion, total_tokens: base.prompt_tokens + completion };
  }

  private add(choice: number, state: ChoiceState, text: string, tokens: readonly TokenLogprobs[]): ChoiceDelta {
    const delta = { choice, text, tokens, textOffset: state.chars };
    state.text += text;
    state.chars += codePoints(text);
    for (const t of tokens) state.tokens.push(t);
    return delta;
  }

  private candidate(a: TokenAlternative): TokenCandidate {
    return { id: a.id, bytes: this.options.tokenizer.tokenBytes(a.id), logprob: a.logprob };
  }

  private tokenLogprobs(entry: Extract<StreamEntry, { kind: 'token' }>): TokenLogprobs {
    if (entry.logprob === undefined) throw invalid(`token ${entry.index} has no logprob although the request asked for logprobs (a decoder without logprobs?)`);
    return { ...this.candidate({ id: entry.id, logprob: entry.logprob }), text: entry.text, top: (entry.top ?? []).map((a) => this.candidate(a)) };
  }

  /** The echoed prompt: its text as the tokenizer's stream decoder releases it, and its tokens' logprobs. */
  private echo(): { text: string; tokens: TokenLogprobs[] } {
    if (this.echoed !== null) return this.echoed;
    const skip = this.options.echo?.skipTokens ?? 0;
    const ids = this.options.promptIds.slice(skip);
    const lps = this.promptLogprobs;
    if (this.options.logprobs && (lps === null || lps.length !== this.options.promptIds.length)) {
      throw invalid(`the prompt's logprobs are ${lps === null ? 'missing' : `for ${lps.length} tokens, not ${this.options.promptIds.length}`}`);
    }
    const stream = this.options.tokenizer.createDecodeStream();
    const texts = ids.map((id) => stream.push(id));
    const rest = stream.flush();
    if (texts.length > 0) texts[texts.length - 1] += rest;
    const tokens: TokenLogprobs[] = [];
    if (this.options.logprobs && lps !== null) {
      for (const [k, id] of ids.entries()) {
        const lp = lps[skip + k];
        const text = texts[k] ?? '';
        const bytes = this.options.tokenizer.tokenBytes(id);
        if (lp === null || lp === undefined) tokens.push({ id, bytes, logprob: 0, text, top: [], scored: false });
        else tokens.push({ id, bytes, logprob: lp.logprob, text, top: lp.top.map((a) => this.candidate(a)) });
      }
    }
    this.echoed = { text: texts.join(''), tokens };
    return this.echoed;
  }
}
