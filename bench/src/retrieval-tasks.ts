/**
 * @module retrieval-tasks
 * RULER-style retrieval tasks on real text for the retrieval suite, in the templates the served model
 * was trained on (training/csa2_train/data.py: the same intros, needles and questions, and the tasks'
 * definitions):
 *
 * - passkey:          "The pass key is 68231. Remember it. 68231 is the pass key."
 * - niah_single:      "One of the special magic numbers for {key} is: {7 digits}."
 * - niah_multikey:    four such needles with different keys; one is asked for
 * - niah_multivalue:  four needles with the same key; all four values are asked for
 * - vt:               "VAR ABCDE = 12345." then 4 hops "VAR FGHIJ = VAR ABCDE."; all 5 names are asked for
 *
 * Haystacks come from the held-out part of the committed corpus (training/data/corpus: the last 5% of
 * each source, cut at a newline as training cuts it), so no haystack sentence was trained on. Needles go
 * between sentences: the first at the sentence boundary nearest the drawn depth (a share of the haystack's
 * characters, as RULER counts depth), the others spread over the sentences after it, in order. The generator is
 * seeded (mulberry32), so one (task, length, depth, sample) is always the same instance. The document is
 * the intro + haystack with its needles (BOS first, as the gateway and ingest add it); the question is
 * the rest of the prompt, asked after it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';

export const RETRIEVAL_TASKS = ['passkey', 'niah_single', 'niah_multikey', 'niah_multivalue', 'vt'] as const;
export type RetrievalTask = (typeof RETRIEVAL_TASKS)[number];

const SOURCES = ['austen', 'mobydick', 'brown'] as const;
const HELD_OUT_FRACTION = 0.05;
const LETTERS = [...'ABCDEFGHIJKLMNOPQRSTUVWXYZ'];
/** A sentence ends after . ! or ? and any closing quotes or brackets, before whitespace (as data.py splits). */
const SENTENCE_END = /(?<=[.!?])["')\]]*\s+/;

/** A seeded generator of uniform floats in [0, 1) (mulberry32). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A seed from the parts that name one instance (FNV-1a of their text). */
export function instanceSeed(...parts: readonly (string | number)[]): number {
  let h = 0x811c9dc5;
  for (const ch of parts.join('|')) {
    h ^= ch.charCodeAt(0);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

function randInt(rnd: () => number, lo: number, hi: number): number {
  return lo + Math.floor(rnd() * (hi - lo + 1));
}

function pick<T>(rnd: () => number, xs: readonly T[]): T {
  return xs[Math.floor(rnd() * xs.length)] as T;
}

/** The held-out texts of the corpus and the word list the needle keys are drawn from. */
export interface RetrievalCorpus {
  /** The last 5% of each source (cut at a newline). */
  readonly heldOut: readonly string[];
  /** Lower-case words of 4–9 letters seen at least 5 times in the training part (keys are two of them). */
  readonly words: readonly string[];
}

export function loadRetrievalCorpus(corpusDir: string): RetrievalCorpus {
  const heldOut: string[] = [];
  const counts = new Map<string, number>();
  let counted = 0;
  for (const name of SOURCES) {
    const text = gunzipSync(readFileSync(join(corpusDir, `${name}.txt.gz`))).toString('utf8');
    const cut = text.lastIndexOf('\n', Math.floor(text.length * (1 - HELD_OUT_FRACTION)) - 1);
    if (cut <= 0) throw new Error(`retrieval corpus: ${name}.txt.gz has no newline to cut its held-out part at`);
    heldOut.push(text.slice(cut + 1));
    // the words of the training part, as data.py draws them (its first 2M characters of the joined text)
    const train = text.slice(0, cut);
    for (const m of train.slice(0, Math.max(0, 2_000_000 - counted)).matchAll(/\b[a-z]{4,9}\b/g)) counts.set(m[0], (counts.get(m[0]) ?? 0) + 1);
    counted += train.length;
  }
  const words = [...counts]
    .filter(([, c]) => c >= 5)
    .map(([w]) => w)
    .sort();
  if (words.length < 100) throw new Error(`retrieval corpus: only ${words.length} key words in ${corpusDir}`);
  return { heldOut, words };
}

/** About `chars` characters of whole held-out sentences from a random place (wrapping into another source). */
function haystackSentences(corpus: RetrievalCorpus, rnd: () => number, chars: number): string[] {
  let text = pick(rnd, corpus.heldOut);
  let start = text.length <= chars + 10 ? 0 : Math.floor(rnd() * (text.length - chars - 1));
  const m = SENTENCE_END.exec(text.slice(start, start + 400));
  if (m !== null) start += m.index + m[0].length;
  let chunk = text.slice(start, start + chars);
  while (chunk.length < chars) {
    text = pick(rnd, corpus.heldOut);
    chunk += ` ${text.slice(0, chars - chunk.length)}`;
  }
  const sentences = chunk
    .split(SENTENCE_END)
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  return sentences.length > 1 ? sentences.slice(0, -1) : sentences; // the cut-off last sentence goes
}

/** One task instance as text. */
export interface RetrievalInstance {
  readonly task: RetrievalTask;
  /** The intro and the haystack with its needles (the document; BOS is added when it is tokenized). */
  readonly document: string;
  /** The question, asked after the document (starts with a newline). */
  readonly question: string;
  /** The expected continuation (starts with a space). */
  readonly answer: string;
  /** What must appear in the output for the answer to count: every value asked for. */
  readonly expected: readonly string[];
  /** The needles that carry an expected value, with their character offsets in `document`. */
  readonly needles: readonly { readonly text: string; readonly offset: number }[];
  /** The depth of the first needle: the share of the haystack's characters before it (at a sentence boundary). */
  readonly depth: number;
}

/** A task instance with about `hayChars` characters of haystack and its first needle at `depth` (0..1). */
export function retrievalInstance(corpus: RetrievalCorpus, task: RetrievalTask, hayChars: number, depth: number, seed: number): RetrievalInstance {
  if (!(depth >= 0 && depth <= 1)) throw new RangeError(`depth must be within [0, 1], got ${depth}`);
  const rnd = seededRandom(seed);
  const hay = haystackSentences(corpus, rnd, Math.max(200, hayChars));
  const key = () => `${pick(rnd, corpus.words)}-${pick(rnd, corpus.words)}`;
  const number7 = () => String(randInt(rnd, 1_000_000, 9_999_999));
  let intro: string;
  let needles: string[];
  let carrying: number[]; // which needles carry an expected value
  let question: string;
  let answer: string;
  let expected: string[];
  switch (task) {
    case 'passkey': {
      const k = String(randInt(rnd, 10000, 99999));
      intro =
        'There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you about the important information there.\n';
      needles = [`The pass key is ${k}. Remember it. ${k} is the pass key.`];
      carrying = [0];
      question = '\nWhat is the pass key? The pass key is';
      answer = ` ${k}`;
      expected = [k];
      break;
    }
    case 'niah_single':
    case 'niah_multikey':
    case 'niah_multivalue': {
      intro = 'Some special magic numbers are hidden within the following text. Make sure to memorize it. I will quiz you about the numbers afterwards.\n';
      const k = key();
      if (task === 'niah_multivalue') {
        const vals = [number7(), number7(), number7(), number7()];
        needles = vals.map((v) => `One of the special magic numbers for ${k} is: ${v}.`);
        carrying = [0, 1, 2, 3];
        question = `\nWhat are all the special magic numbers for ${k} mentioned in the provided text? The special magic numbers for ${k} mentioned in the provided text are`;
        answer = ` ${vals.slice(0, -1).join(', ')}, and ${vals[3] as string}`;
        expected = vals;
      } else {
        const v = number7();
        needles = [`One of the special magic numbers for ${k} is: ${v}.`];
        if (task === 'niah_multikey') for (let i = 0; i < 3; i++) needles.push(`One of the special magic numbers for ${key()} is: ${number7()}.`);
        // the asked needle takes a seeded place among the four (the first needle goes at the depth)
        const at = task === 'niah_multikey' ? Math.floor(rnd() * 4) : 0;
        [needles[0], needles[at]] = [needles[at] as string, needles[0] as string];
        carrying = [at];
        question = `\nWhat is the special magic number for ${k} mentioned in the provided text? The special magic number for ${k} mentioned in the provided text is`;
        answer = ` ${v}`;
        expected = [v];
      }
      break;
    }
    case 'vt': {
      intro = 'Memorize and track the chain of variable assignment hidden in the following text.\n';
      const names: string[] = [];
      while (names.length < 5) {
        const n = Array.from({ length: 5 }, () => pick(rnd, LETTERS)).join('');
        if (!names.includes(n)) names.push(n);
      }
      const num = String(randInt(rnd, 10000, 99999));
      needles = [`VAR ${names[0] as string} = ${num}.`, ...names.slice(1).map((n, i) => `VAR ${n} = VAR ${names[i] as string}.`)];
      carrying = [0, 1, 2, 3, 4];
      question = `\nQuestion: Find all variables that are assigned the value ${num} in the text above. Answer: According to the chain of variable assignment in the text above, 5 variables are assigned the value ${num}, they are:`;
      answer = ` ${names.join(' ')}`;
      expected = names;
      break;
    }
  }
  // the first needle at the depth, the others spread over the rest, in order
  const n = hay.length;
  // the sentence boundary nearest to `depth` of the haystack's characters (RULER's depth is a share of the context)
  const starts: number[] = []; // character offset of the boundary before sentence i, i = 0..n
  for (let i = 0, at = 0; i <= n; i++) {
    starts.push(at);
    at += (hay[i]?.length ?? 0) + 1;
  }
  const target = depth * (starts[n] as number);
  let first = 0;
  for (let i = 1; i <= n; i++) if (Math.abs((starts[i] as number) - target) < Math.abs((starts[first] as number) - target)) first = i;
  const spots = needles.map((_, i) => (i === 0 ? first : first + Math.floor(((n - first) * i) / (needles.length - 1 + 0.5))));
  const parts: string[] = [];
  const offsets: number[] = [];
  let length = intro.length;
  let j = 0;
  const add = (s: string) => {
    if (parts.length > 0) length += 1; // the joining space
    parts.push(s);
    length += s.length;
  };
  for (let i = 0; i <= n; i++) {
    while (j < needles.length && spots[j] === i) {
      offsets.push(length + (parts.length > 0 ? 1 : 0));
      add(needles[j] as string);
      j++;
    }
    if (i < n) add(hay[i] as string);
  }
  const document = intro + parts.join(' ');
  return {
    task,
    document,
    question,
    answer,
    expected,
    needles: carrying.map((c) => ({ text: needles[c] as string, offset: offsets[c] as number })),
    depth,
  };
}

/** The answer counts when every expected value appears in the generated text (RULER's string match). */
export function answerCorrect(instance: Pick<RetrievalInstance, 'expected'>, output: string): boolean {
  return instance.expected.every((v) => output.includes(v));
}
