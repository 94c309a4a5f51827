"""Training data: the committed public-domain corpus, and seeded synthetic retrieval tasks on real text.

Corpus (training/data/corpus, see data/extract_corpus.py): Austen (6 novels), Moby Dick, Brown. Each
source is split 95 / 5 by characters: the first 95% feeds training (LM windows and task haystacks),
the last 5% the held-out loss and the held-out task haystacks.

Tasks (RULER-style, /work/shared/docs/long-context-eval.md §4; haystacks are real text, needles go
between sentences at the drawn depth):
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
from tokenizers import Tokenizer

SOURCES = ("austen", "mobydick", "brown")
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


class Corpus:
    def __init__(self, corpus_dir: Path, tokenizer_path: Path):
        self.tok = Tokenizer.from_file(str(tokenizer_path))
        self.bos = self.tok.token_to_id("<|bos|>")
        self.eos = self.tok.token_to_id("<|eos|>")
        self.text = {"train": [], "heldout": []}
        for name in SOURCES:
            with gzip.open(Path(corpus_dir) / f"{name}.txt.gz", "rt", encoding="utf-8") as f:
                t = f.read()
            cut = t.rfind("\n", 0, int(len(t) * (1 - HELD_OUT_FRACTION)))
            self.text["train"].append(t[:cut])
            self.text["heldout"].append(t[cut + 1 :])
        self.ids = {}
        for split, texts in self.text.items():
            parts = [self.encode_long(t) for t in texts]
            self.ids[split] = np.concatenate([np.concatenate([[self.bos], p]) for p in parts]).astype(np.int32)
        from collections import Counter

        counts = Counter(re.findall(r"\b[a-z]{4,9}\b", " ".join(self.text["train"])[:2_000_000]))
        self.words = sorted(w for w, c in counts.items() if c >= 5)

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

    def task_text(self, rng: random.Random, task: str, hay_chars: int, split: str, depth: float | None = None):
        """(prompt text, answer text) of one task instance with about hay_chars of haystack."""
        hay = self.sentences(rng, hay_chars, split)
        d = rng.random() if depth is None else depth
        if task == "passkey":
            k = str(rng.randint(10000, 99999))
            intro = "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you about the important information there.\n"
            needles = [f"The pass key is {k}. Remember it. {k} is the pass key."]
            question = "\nWhat is the pass key? The pass key is"
            answer = f" {k}"
        elif task in ("niah_single", "niah_multikey", "niah_multivalue"):
            intro = "Some special magic numbers are hidden within the following text. Make sure to memorize it. I will quiz you about the numbers afterwards.\n"
            key = self._key(rng)
            if task == "niah_single":
                vals = [str(rng.randint(1_000_000, 9_999_999))]
                needles = [f"One of the special magic numbers for {key} is: {vals[0]}."]
            elif task == "niah_multikey":
                vals = [str(rng.randint(1_000_000, 9_999_999))]
                others = [self._key(rng) for _ in range(3)]
                needles = [f"One of the special magic numbers for {key} is: {vals[0]}."]
                needles += [f"One of the special magic numbers for {o} is: {rng.randint(1_000_000, 9_999_999)}." for o in others]
                rng.shuffle(needles)
            else:
                vals = [str(rng.randint(1_000_000, 9_999_999)) for _ in range(4)]
                needles = [f"One of the special magic numbers for {key} is: {v}." for v in vals]
            if task == "niah_multivalue":
                question = f"\nWhat are all the special magic numbers for {key} mentioned in the provided text? The special magic numbers for {key} mentioned in the provided text are"
                answer = " " + ", ".join(vals[:-1]) + ", and " + vals[-1]
            else:
                question = f"\nWhat is the special magic number for {key} mentioned in the provided text? The special magic number for {key} mentioned in the provided text is"
                answer = f" {vals[0]}"
        elif task == "vt":
            intro = "Memorize and track the chain of variable assignment hidden in the following text.\n"
            names = []
            while len(names) < 5:
                n = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))
                if n not in names:
                    names.append(n)
            num = str(rng.randint(10000, 99999))
            needles = [f"VAR {names[0]} = {num}."] + [f"VAR {names[i + 1]} = VAR {names[i]}." for i in range(4)]
            question = f"\nQuestion: Find all variables that are assigned the value {num} in the text above. Answer: According to the chain of variable assignment in the text above, 5 variables are assigned the value {num}, they are:"
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

    def task_sample(self, rng: random.Random, task: str, seq_len: int, split: str = "train", target_len: int | None = None, depth: float | None = None) -> Sample:
        """One task instance of about target_len tokens (default: 60-95% of seq_len), packed to seq_len."""
        target = target_len or int(seq_len * rng.uniform(0.6, 0.95))
        chars = max(200, int(target * 3.6))
        for _ in range(4):
            state = rng.getstate()
            prompt, answer = self.task_text(rng, task, chars, split, depth)
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


def make_batch(corpus: Corpus, rng: random.Random, batch: int, seq_len: int, task_fraction: float, split: str = "train", task_weights: dict | None = None, with_doc_end: bool = False):
    """(ids [B, S] int64, answer_mask [B, S] bool, tasks list) with about task_fraction task samples,
    the tasks drawn uniformly or by task_weights (task -> relative weight); with_doc_end: and the
    samples' doc_end (int64 [B], -1 for plain text) as a fourth value."""
    names = list(task_weights) if task_weights else list(TASKS)
    weights = [task_weights[t] for t in names] if task_weights else None
    ids = np.zeros((batch, seq_len), dtype=np.int64)
    am = np.zeros((batch, seq_len), dtype=bool)
    tasks = []
    doc_end = np.full(batch, -1, dtype=np.int64)
    for b in range(batch):
        if rng.random() < task_fraction:
            task = rng.choices(names, weights)[0] if weights else rng.choice(names)
            s = corpus.task_sample(rng, task, seq_len, split)
            ids[b], am[b] = s.ids, s.answer_mask
            doc_end[b] = s.doc_end
            tasks.append(s.task)
        else:
            ids[b] = corpus.lm_window(rng, seq_len, split)
            tasks.append("lm")
    return (ids, am, tasks, doc_end) if with_doc_end else (ids, am, tasks)
