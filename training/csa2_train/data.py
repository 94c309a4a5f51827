"""Training data: the committed public-domain corpus, and seeded synthetic retrieval tasks on real text.

Corpus (training/data/corpus, see data/extract_corpus.py): Austen (6 novels), Moby Dick, Brown. Each
source is split 95 / 5 by characters: the first 95% feeds training (LM windows and task haystacks),
the last 5% the held-out loss and the held-out task haystacks.

More sources (data/extract_debian_text.py, corpus/MANIFEST.json): KJV, the Python documentation and
Debian Reference can be added to training (`sources=TRAIN_SOURCES_ALL`, train.py `--corpus-sources`);
the Jargon File and The Devil's Dictionary (a glossary genre) are evaluation only (EVAL_SOURCES, the
"genre" split). The "heldout" split is the last 5% of `heldout_sources` (default the original three,
whatever trains, so held-out figures stay comparable); the last 5% of every training source is never
trained on.

Tasks (RULER-style, /work/shared/docs/long-context-eval.md §4; haystacks are real text, needles go
between sentences at the drawn depth). The wordings below are the "canonical" phrasing set; the "train"
and "heldout" sets (csa2_train/phrasings.py) word the same tasks in many other ways:
- passkey:          "The pass key is 68231. Remember it. 68231 is the pass key." -> " 68231"
- niah_single:      "One of the special magic numbers for {key} is: {7 digits}." -> the number
- niah_multikey:    four such needles with different keys; one is asked for
- niah_multivalue:  four needles with the same key; all four values, in order of appearance
- vt:               "VAR ABCDE = 12345." then 4 hops "VAR FGHIJ = VAR ABCDE." -> the 5 names
Every sample starts with <|bos|> (as csa2-serve's gateway and ingest do), ends the answer with
<|eos|>, and is filled up to the sequence length with corpus text (after another <|bos|>), so the batch
packs. `answer_mask` marks the answer tokens (for the extra answer loss and the accuracy figures).
"""

import gzip
import random
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import phrasings

SOURCES = ("austen", "mobydick", "brown")  # the served model's training text (the default)
TRAIN_SOURCES_ALL = SOURCES + ("kjv", "pydoc", "debref")
EVAL_SOURCES = ("jargon", "devil")  # the held-out genre (glossaries): evaluation only
HELD_OUT_FRACTION = 0.05
TASKS = ("passkey", "niah_single", "niah_multikey", "niah_multivalue", "vt")
_SENT_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")


@dataclass
class Sample:
    ids: np.ndarray  # int32 [S]
    answer_mask: np.ndarray  # bool [S]: targets (positions whose next token is an answer token)
    task: str
    length: int  # tokens of the task part (prompt + answer) before the filler
    # the question's first token (the prompt's last line, from its last newline): the end of the document
    # when the haystack is stored as a document and the question appended (the bench's split; tokenizing
    # the two apart gives the same ids, checked on 400 prompts); -1 for plain text
    doc_end: int = -1


def read_source(corpus_dir: Path, name: str) -> str:
    with gzip.open(Path(corpus_dir) / f"{name}.txt.gz", "rt", encoding="utf-8") as f:
        return f.read()


def split_source(t: str) -> tuple:
    """(training part, held-out part): the first 95% / last 5% of a source, cut at a line end."""
    cut = t.rfind("\n", 0, int(len(t) * (1 - HELD_OUT_FRACTION)))
    return t[:cut], t[cut + 1 :]


def load_texts(corpus_dir: Path, sources=SOURCES, heldout_sources=SOURCES, eval_sources=()) -> dict:
    """{"train": [...], "heldout": [...], "genre": [...]}: the training parts of `sources`, the held-out
    parts of `heldout_sources`, the whole of `eval_sources` (no split "genre" when empty)."""
    overlap = set(eval_sources) & (set(sources) | set(heldout_sources))
    if overlap:
        raise ValueError(f"evaluation-only sources also in training / held-out sources: {sorted(overlap)}")
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = split_source(read_source(corpus_dir, name))
        return cache[name]

    text = {"train": [get(n)[0] for n in sources], "heldout": [get(n)[1] for n in heldout_sources]}
    if eval_sources:
        text["genre"] = [read_source(corpus_dir, n) for n in eval_sources]
    return text


class TextTasks:
    """The task texts (no tokenizer): haystacks from `text[split]`, keys from `words`."""

    def __init__(self, text: dict, words: list | None = None):
        self.text = text
        if words is None:
            from collections import Counter

            counts = Counter(re.findall(r"\b[a-z]{4,9}\b", " ".join(self.text["train"])[:2_000_000]))
            words = sorted(w for w, c in counts.items() if c >= 5)
        self.words = words

    # --- haystacks ---
    def sentences(self, rng: random.Random, n_chars: int, split: str) -> list[str]:
        texts = self.text[split]
        t = texts[rng.randrange(len(texts))]
        if len(t) <= n_chars + 10:
            start = 0
        else:
            start = rng.randrange(0, len(t) - n_chars - 1)
        m = _SENT_END.search(t, start)
        start = m.end() if m and m.end() < len(t) - 1 else start
        chunk = t[start : start + n_chars]
        while len(chunk) < n_chars:  # wrap into another source when this one ends
            t = texts[rng.randrange(len(texts))]
            chunk += " " + t[: n_chars - len(chunk)]
        sents = [s.strip() for s in _SENT_END.split(chunk) if s.strip()]
        return sents[:-1] if len(sents) > 1 else sents  # drop the cut-off last sentence

    def _key(self, rng: random.Random) -> str:
        return f"{rng.choice(self.words)}-{rng.choice(self.words)}"

    def task_text(self, rng: random.Random, task: str, hay_chars: int, split: str, depth: float | None = None, phrasing: str = "canonical"):
        """(prompt text, answer text) of one task instance with about hay_chars of haystack, worded from
        the phrasing set `phrasing` (phrasings.SETS; "canonical" draws the same random stream as before
        the other sets existed, so its samples are unchanged)."""
        hay = self.sentences(rng, hay_chars, split)
        d = rng.random() if depth is None else depth
        P = phrasings.draw(rng, task, phrasing)
        intro = P.fill_intro()
        if task == "passkey":
            k = str(rng.randint(10000, 99999))
            needles = [P.needle.format(k=k, noun=P.noun)]
            question = P.question.format(noun=P.noun)
            answer = f" {k}"
        elif task in ("niah_single", "niah_multikey", "niah_multivalue"):
            key = self._key(rng)

            def needle(kk, v):
                return P.needle.format(key=kk, value=v, noun=P.noun)

            if task == "niah_single":
                vals = [str(rng.randint(1_000_000, 9_999_999))]
                needles = [needle(key, vals[0])]
            elif task == "niah_multikey":
                vals = [str(rng.randint(1_000_000, 9_999_999))]
                others = [self._key(rng) for _ in range(3)]
                needles = [needle(key, vals[0])]
                needles += [needle(o, rng.randint(1_000_000, 9_999_999)) for o in others]
                rng.shuffle(needles)
            else:
                vals = [str(rng.randint(1_000_000, 9_999_999)) for _ in range(4)]
                needles = [needle(key, v) for v in vals]
            question = P.question.format(key=key, noun=P.noun)
            if task == "niah_multivalue":
                answer = " " + ", ".join(vals[:-1]) + ", and " + vals[-1]
            else:
                answer = f" {vals[0]}"
        elif task == "vt":
            names = []
            while len(names) < 5:
                n = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))
                if n not in names:
                    names.append(n)
            num = str(rng.randint(10000, 99999))
            needles = [P.needle.format(a=names[0], num=num)] + [P.hop.format(a=names[i], b=names[i + 1]) for i in range(4)]
            question = P.question.format(num=num)
            answer = " " + " ".join(names)
        else:
            raise ValueError(task)
        # needle positions: the first at depth d, the others spread after it (in order)
        n = len(hay)
        first = int(round(d * n))
        if len(needles) == 1:
            spots = [first]
        else:
            span = n - first
            spots = sorted([first] + [first + int(span * (i + 1) / (len(needles) + 0.5)) for i in range(len(needles) - 1)])
            if task != "vt" and depth is None:
                spots = sorted(rng.sample(range(n + 1), len(needles)) if n + 1 >= len(needles) else rng.choices(range(n + 1), k=len(needles)))
        out, j = [], 0
        for i in range(n + 1):
            while j < len(needles) and spots[j] == i:
                out.append(needles[j])
                j += 1
            if i < n:
                out.append(hay[i])
        return intro + " ".join(out) + question, answer

class Corpus(TextTasks):
    """The corpus tokenized: LM windows and tokenized task samples. sources: the training sources (their
    first 95%); heldout_sources: whose last 5% is the "heldout" split; eval_sources: the "genre" split."""

    def __init__(self, corpus_dir: Path, tokenizer_path: Path, sources=SOURCES, heldout_sources=SOURCES, eval_sources=()):
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(tokenizer_path))
        self.bos = self.tok.token_to_id("<|bos|>")
        self.eos = self.tok.token_to_id("<|eos|>")
        super().__init__(load_texts(corpus_dir, tuple(sources), tuple(heldout_sources), tuple(eval_sources)))
        self.ids = {}
        for split, texts in self.text.items():
            parts = [self.encode_long(t) for t in texts]
            self.ids[split] = np.concatenate([np.concatenate([[self.bos], p]) for p in parts]).astype(np.int32)

    def encode_long(self, text: str, piece_chars: int = 65536) -> np.ndarray:
        """encode(text) of a long text, in parallel pieces cut just before a lone "\n" between two
        non-space characters: the byte-level pre-tokenizer always isolates such a newline, so the
        pieces' tokens concatenate to the whole text's tokens."""
        cuts, i = [0], piece_chars
        while i < len(text):
            j = text.find("\n", i)
            while j != -1 and not (0 < j < len(text) - 1 and not text[j - 1].isspace() and not text[j + 1].isspace()):
                j = text.find("\n", j + 1)
            if j == -1:
                break
            cuts.append(j)
            i = j + piece_chars
        cuts.append(len(text))
        pieces = [text[a:b] for a, b in zip(cuts, cuts[1:])]
        return np.concatenate([np.array(e.ids, dtype=np.int32) for e in self.tok.encode_batch(pieces)])

    # --- plain language-model windows ---
    def lm_window(self, rng: random.Random, n: int, split: str = "train") -> np.ndarray:
        data = self.ids[split]
        start = rng.randrange(0, len(data) - n - 1)
        w = data[start : start + n].copy()
        w[0] = self.bos
        return w

    def task_sample(self, rng: random.Random, task: str, seq_len: int, split: str = "train", target_len: int | None = None, depth: float | None = None, phrasing: str = "canonical") -> Sample:
        """One task instance of about target_len tokens (default: 60-95% of seq_len), packed to seq_len,
        worded from the phrasing set `phrasing`; its filler comes from `split` ("genre": from the
        evaluation-only sources too)."""
        target = target_len or int(seq_len * rng.uniform(0.6, 0.95))
        chars = max(200, int(target * 3.6))
        for _ in range(4):
            state = rng.getstate()
            prompt, answer = self.task_text(rng, task, chars, split, depth, phrasing)
            p_ids = self.tok.encode(prompt).ids
            n_q = len(self.tok.encode(prompt[prompt.rfind("\n") :]).ids)
            a_ids = self.tok.encode(answer).ids
            total = 1 + len(p_ids) + len(a_ids) + 1
            if total <= min(seq_len, target + 16) or chars <= 200:
                break
            chars = max(200, int(chars * (target / total) * 0.98))
            rng.setstate(state)
            rng.random()
        ids = np.array([self.bos] + p_ids + a_ids + [self.eos], dtype=np.int32)
        if len(ids) > seq_len:  # keep the question and answer, cut haystack text from the front
            ids = np.concatenate([[self.bos], ids[len(ids) - seq_len + 1 :]]).astype(np.int32)
        mask = np.zeros(seq_len, dtype=bool)
        a0 = len(ids) - 1 - len(a_ids)  # first answer token index
        mask[a0 - 1 : a0 - 1 + len(a_ids) + 1] = True  # predict each answer token and the final eos
        length = len(ids)
        if length < seq_len:
            fill = self.lm_window(rng, seq_len - length, split)
            ids = np.concatenate([ids, fill])
        return Sample(ids=ids[:seq_len], answer_mask=mask, task=task, length=length, doc_end=max(0, a0 - n_q))


def make_batch(corpus: Corpus, rng: random.Random, batch: int, seq_len: int, task_fraction: float, split: str = "train", task_weights: dict | None = None, with_doc_end: bool = False, phrasing_frac: float = 0.0):
    """(ids [B, S] int64, answer_mask [B, S] bool, tasks list) with about task_fraction task samples,
    the tasks drawn uniformly or by task_weights (task -> relative weight); with_doc_end: and the
    samples' doc_end (int64 [B], -1 for plain text) as a fourth value. phrasing_frac: the share of the
    task samples worded from the "train" phrasing set (the others canonical); 0 draws nothing for it,
    so the batches are the same as before the option existed."""
    names = list(task_weights) if task_weights else list(TASKS)
    weights = [task_weights[t] for t in names] if task_weights else None
    ids = np.zeros((batch, seq_len), dtype=np.int64)
    am = np.zeros((batch, seq_len), dtype=bool)
    tasks = []
    doc_end = np.full(batch, -1, dtype=np.int64)
    for b in range(batch):
        if rng.random() < task_fraction:
            task = rng.choices(names, weights)[0] if weights else rng.choice(names)
            phr = "train" if phrasing_frac > 0 and rng.random() < phrasing_frac else "canonical"
            s = corpus.task_sample(rng, task, seq_len, split, phrasing=phr)
            ids[b], am[b] = s.ids, s.answer_mask
            doc_end[b] = s.doc_end
            tasks.append(s.task)
        else:
            ids[b] = corpus.lm_window(rng, seq_len, split)
            tasks.append("lm")
    return (ids, am, tasks, doc_end) if with_doc_end else (ids, am, tasks)
