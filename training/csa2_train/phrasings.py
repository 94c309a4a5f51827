"""Wordings of the synthetic retrieval tasks: the canonical templates, and many paraphrases split into a
training set and a held-out set (evaluation only).

A task instance has four worded parts: the intro (the prompt's first line, possibly empty), the needle
(the sentence hidden in the haystack; variable tracking has two: the value assignment and the hop),
the question (the prompt's last line, which ends with an answer prefix the answer continues) and, for
passkey and NIAH, the noun the needle names its number by ("pass key", "access code", "magic number").
The question either repeats the needle's noun ({noun}) or asks in generic words ("the secret number
mentioned in the text"), as a user would.

Three phrasing sets (`SETS`), per task family (passkey; NIAH single / multi-key; NIAH multi-value; vt):

- "canonical": exactly the templates csa2_train.data has always used (RULER's and the passkey test's);
  the served model's evaluation cells (`passkey@4096`, ...) use these, so its figures stay comparable.
  Drawing it takes nothing from the random stream.
- "train": the canonical wording plus the training paraphrases; every part is drawn independently, so
  the combinations are many more than the listed parts.
- "heldout": paraphrases that no training sample uses: intros, needles, questions and nouns of their own,
  drawn only from the held-out lists. The split is fixed by the lists below (not by a hash), so it is
  deterministic and reviewable; tests check that no held-out part equals, or normalizes to, a training part.

All questions are one line (the stored-document path splits the prompt at its last newline) and end with
an answer prefix; the answers keep their format (" 68231", " 1234567", " a, b, c, and d", " ABCDE ...").
"""

import random
import re
from dataclasses import dataclass

SETS = ("canonical", "train", "heldout")
FAMILIES = ("passkey", "niah", "niah_multivalue", "vt")


def family(task: str) -> str:
    if task == "passkey":
        return "passkey"
    if task in ("niah_single", "niah_multikey"):
        return "niah"
    if task == "niah_multivalue":
        return "niah_multivalue"
    if task == "vt":
        return "vt"
    raise ValueError(task)


# Each list entry: (id, text). Needles of the canonical set pin their noun (the fourth field of the tuples
# of NEEDLES is the noun the needle fixes, None when it uses {noun}).

PASSKEY = {
    "canonical": {
        "intros": [("pk.i.c", "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you about the important information there.\n")],
        "needles": [("pk.n.c", "The pass key is {k}. Remember it. {k} is the pass key.", "pass key")],
        "questions": [("pk.q.c", "\nWhat is the pass key? The pass key is")],
        "nouns": [("pk.noun.c", "pass key")],
    },
    "train": {
        "intros": [
            ("pk.i.c", "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you about the important information there.\n"),
            ("pk.i.t1", ""),
            ("pk.i.t2", "Below is a long text. Somewhere in it there is a number you will be asked about later. Find it and keep it in mind.\n"),
            ("pk.i.t3", "Read the following document carefully. It contains a code that you must remember.\n"),
            ("pk.i.t4", "Here is some text with a hidden {noun} in it. Memorize the {noun}; I will ask you for it at the end.\n"),
            ("pk.i.t5", "The text below is mostly filler, but one line carries a number that matters. Remember that number.\n"),
        ],
        "needles": [
            ("pk.n.c", "The pass key is {k}. Remember it. {k} is the pass key.", "pass key"),
            ("pk.n.t1", "The {noun} is {k}. Remember it. {k} is the {noun}.", None),
            ("pk.n.t2", "The {noun} is {k}.", None),
            ("pk.n.t3", "Remember this {noun}: {k}.", None),
            ("pk.n.t4", "Important: the {noun} is {k}. Do not forget it.", None),
            ("pk.n.t5", "Your {noun} is {k}. Keep it safe.", None),
            ("pk.n.t6", "Note that the {noun} you will need later is {k}.", None),
            ("pk.n.t7", "{k} is the {noun}. Please memorize it.", None),
        ],
        "questions": [
            ("pk.q.c", "\nWhat is the pass key? The pass key is"),
            ("pk.q.t1", "\nWhat is the {noun}? The {noun} is"),
            ("pk.q.t2", "\nWhat is the {noun} mentioned in the text above? The {noun} mentioned in the text above is"),
            ("pk.q.t3", "\nQuestion: What is the {noun}? Answer:"),
            ("pk.q.t4", "\nQ: Which number is the {noun}? A:"),
            ("pk.q.t5", "\nUser: What was the {noun} in that text? Assistant: The {noun} was"),
            ("pk.q.t6", "\nWhich number were you asked to remember? The number I was asked to remember is"),
            ("pk.q.t7", "\nPlease tell me the {noun} from the document. The {noun} is"),
        ],
        "nouns": [("pk.noun.c", "pass key"), ("pk.noun.t1", "passkey"), ("pk.noun.t2", "secret code"), ("pk.noun.t3", "access code"),
                  ("pk.noun.t4", "password"), ("pk.noun.t5", "secret number"), ("pk.noun.t6", "PIN")],
    },
    "heldout": {
        "intros": [
            ("pk.i.h1", "Please go through the document that follows. A piece of information is buried in it, and you will need it afterwards.\n"),
            ("pk.i.h2", "Attention: one important number is concealed in the passage below. Keep a mental note of it.\n"),
        ],
        "needles": [
            ("pk.n.h1", "Make a mental note of the {noun}, which is {k}.", None),
            ("pk.n.h2", "For later reference, the {noun} has been set to {k}.", None),
            ("pk.n.h3", "Here it is: the {noun} equals {k}. Once more, {k}.", None),
            ("pk.n.h4", "Do not lose this: {noun} = {k}.", None),
        ],
        "questions": [
            ("pk.q.h1", "\nWhat is the secret number mentioned in the text? The secret number is"),
            ("pk.q.h2", "\nUser: Do you recall the {noun} hidden in the document? Assistant: Yes, the {noun} is"),
            ("pk.q.h3", "\nQuestion: Which {noun} appeared in the passage? Answer: The {noun} that appeared in the passage is"),
            ("pk.q.h4", "\nTell me the number that was hidden in the text. The hidden number is"),
        ],
        "nouns": [("pk.noun.h1", "combination"), ("pk.noun.h2", "unlock code"), ("pk.noun.h3", "secret key")],
    },
}

_NIAH_INTRO_C = "Some special magic numbers are hidden within the following text. Make sure to memorize it. I will quiz you about the numbers afterwards.\n"
_NIAH_NEEDLE_C = "One of the special magic numbers for {key} is: {value}."

NIAH = {
    "canonical": {
        "intros": [("ni.i.c", _NIAH_INTRO_C)],
        "needles": [("ni.n.c", _NIAH_NEEDLE_C, "special magic number")],
        "questions": [("ni.q.c", "\nWhat is the special magic number for {key} mentioned in the provided text? The special magic number for {key} mentioned in the provided text is")],
        "nouns": [("ni.noun.c", "special magic number")],
    },
    "train": {
        "intros": [
            ("ni.i.c", _NIAH_INTRO_C),
            ("ni.i.t1", ""),
            ("ni.i.t2", "Several special numbers are hidden in the text below, each tied to a name. Keep track of them; you will be asked about one.\n"),
            ("ni.i.t3", "The following document contains a few magic numbers. Remember which number goes with which name.\n"),
        ],
        "needles": [
            ("ni.n.c", _NIAH_NEEDLE_C, "special magic number"),
            ("ni.n.t1", "The {noun} for {key} is {value}.", None),
            ("ni.n.t2", "One of the {noun}s for {key} is: {value}.", None),
            ("ni.n.t3", "Remember: the {noun} associated with {key} is {value}.", None),
            ("ni.n.t4", "The name {key} has the {noun} {value}.", None),
            ("ni.n.t5", "For {key}, the {noun} is {value}.", None),
        ],
        "questions": [
            ("ni.q.c", "\nWhat is the special magic number for {key} mentioned in the provided text? The special magic number for {key} mentioned in the provided text is"),
            ("ni.q.t1", "\nWhat are all the special magic numbers for {key} mentioned in the provided text? The special magic numbers for {key} mentioned in the provided text are"),
            ("ni.q.t2", "\nWhat is the {noun} for {key}? The {noun} for {key} is"),
            ("ni.q.t3", "\nQuestion: What is the {noun} associated with {key}? Answer:"),
            ("ni.q.t4", "\nQ: Which {noun} goes with {key}? A:"),
            ("ni.q.t5", "\nUser: What {noun} was given for {key}? Assistant: The {noun} for {key} is"),
        ],
        "nouns": [("ni.noun.c", "special magic number"), ("ni.noun.t1", "magic number"), ("ni.noun.t2", "special number"),
                  ("ni.noun.t3", "secret number"), ("ni.noun.t4", "code number")],
    },
    "heldout": {
        "intros": [
            ("ni.i.h1", "A few special numbers have been tucked away in the passage below. Read it closely and keep them in mind; questions about them follow at the end.\n"),
            ("ni.i.h2", "Below you will find a long passage. Certain numbers linked to particular names appear in it; memorize those links.\n"),
        ],
        "needles": [
            ("ni.n.h1", "One {noun} tied to {key} is: {value}.", None),
            ("ni.n.h2", "Keep in mind that {key} goes with the {noun} {value}.", None),
            ("ni.n.h3", "The {noun} assigned to {key} reads {value}.", None),
        ],
        "questions": [
            ("ni.q.h1", "\nWhich {noun} belongs to {key} according to the passage above? The {noun} belonging to {key} according to the passage above is"),
            ("ni.q.h2", "\nUser: Can you find the {noun} for {key} in the document? Assistant: Sure, the {noun} for {key} is"),
            ("ni.q.h3", "\nWhat number is linked to {key} in the text? The number linked to {key} is"),
        ],
        "nouns": [("ni.noun.h1", "lucky number"), ("ni.noun.h2", "reference number")],
    },
}

# multi-value NIAH: the needles and intros of NIAH, questions in the plural
NIAH_MULTIVALUE_QUESTIONS = {
    "canonical": [("nm.q.c", "\nWhat are all the special magic numbers for {key} mentioned in the provided text? The special magic numbers for {key} mentioned in the provided text are")],
    "train": [
        ("nm.q.c", "\nWhat are all the special magic numbers for {key} mentioned in the provided text? The special magic numbers for {key} mentioned in the provided text are"),
        ("nm.q.t1", "\nList every {noun} for {key} in the text. The {noun}s for {key} are"),
        ("nm.q.t2", "\nQuestion: Which {noun}s were given for {key}? Answer:"),
    ],
    "heldout": [
        ("nm.q.h1", "\nUser: What are the {noun}s mentioned for {key}? Assistant: The {noun}s mentioned for {key} are"),
        ("nm.q.h2", "\nWhich {noun}s does the passage give for {key}, in order? In order, they are"),
    ],
}

VT = {
    "canonical": {
        "intros": [("vt.i.c", "Memorize and track the chain of variable assignment hidden in the following text.\n")],
        # (id, value assignment, hop)
        "needles": [("vt.n.c", "VAR {a} = {num}.", "VAR {b} = VAR {a}.")],
        "questions": [("vt.q.c", "\nQuestion: Find all variables that are assigned the value {num} in the text above. Answer: According to the chain of variable assignment in the text above, 5 variables are assigned the value {num}, they are:")],
    },
    "train": {
        "intros": [
            ("vt.i.c", "Memorize and track the chain of variable assignment hidden in the following text.\n"),
            ("vt.i.t1", "Follow the chain of variable assignments hidden in the text below.\n"),
            ("vt.i.t2", ""),
        ],
        "needles": [
            ("vt.n.c", "VAR {a} = {num}.", "VAR {b} = VAR {a}."),
            ("vt.n.t1", "{a} = {num}.", "{b} = {a}."),
            ("vt.n.t2", "Let {a} be {num}.", "Let {b} be {a}."),
        ],
        "questions": [
            ("vt.q.c", "\nQuestion: Find all variables that are assigned the value {num} in the text above. Answer: According to the chain of variable assignment in the text above, 5 variables are assigned the value {num}, they are:"),
            ("vt.q.t1", "\nWhich variables hold the value {num}? Answer: The variables that hold the value {num} are:"),
            ("vt.q.t2", "\nQuestion: Name every variable whose value is {num}. Answer:"),
        ],
    },
    "heldout": {
        "intros": [("vt.i.h1", "Some variables are assigned to one another in the passage below. Keep track of which ones end up holding the same value.\n")],
        "needles": [
            ("vt.n.h1", "The variable {a} is set to {num}.", "The variable {b} is set to the value of {a}."),
            ("vt.n.h2", "Assign {num} to {a}.", "Assign {a} to {b}."),
        ],
        "questions": [("vt.q.h1", "\nUser: List all the variables equal to {num}. Assistant: The variables equal to {num} are")],
    },
}


@dataclass(frozen=True)
class Phrasing:
    """One drawn wording. ids: the parts' ids (for logs and tests)."""

    set: str
    intro: str
    needle: str  # passkey: {k}; NIAH: {key} {value}; vt: the value assignment {a} {num}
    question: str  # one line, starting with "\n", ending with the answer prefix
    noun: str = ""
    hop: str = ""  # vt only: {a} {b}
    ids: tuple = ()

    def fill_intro(self) -> str:
        return self.intro.replace("{noun}", self.noun)


def _pick(rng: random.Random, items: list, canonical: bool):
    return items[0] if canonical else items[rng.randrange(len(items))]


def draw(rng: random.Random, task: str, phrasing_set: str = "canonical") -> Phrasing:
    """A wording for one instance of `task` from a phrasing set. "canonical" takes nothing from rng."""
    if phrasing_set not in SETS:
        raise ValueError(f"phrasing set {phrasing_set!r} (known: {', '.join(SETS)})")
    c = phrasing_set == "canonical"
    fam = family(task)
    if fam == "vt":
        t = VT[phrasing_set]
        i, n, q = _pick(rng, t["intros"], c), _pick(rng, t["needles"], c), _pick(rng, t["questions"], c)
        return Phrasing(phrasing_set, i[1], n[1], q[1], hop=n[2], ids=(i[0], n[0], q[0]))
    t = PASSKEY[phrasing_set] if fam == "passkey" else NIAH[phrasing_set]
    i, n = _pick(rng, t["intros"], c), _pick(rng, t["needles"], c)
    qs = NIAH_MULTIVALUE_QUESTIONS[phrasing_set] if fam == "niah_multivalue" else t["questions"]
    q = _pick(rng, qs, c)
    noun = n[2] if n[2] is not None else _pick(rng, t["nouns"], c)[1]
    return Phrasing(phrasing_set, i[1], n[1], q[1], noun=noun, ids=(i[0], n[0], q[0], noun))


def parts(phrasing_set: str) -> dict:
    """Every worded part of a set: {kind: {id: text}}, kind in intros, needles, questions, nouns (all families)."""
    out = {"intros": {}, "needles": {}, "questions": {}, "nouns": {}}
    for fam in (PASSKEY, NIAH, VT):
        t = fam[phrasing_set]
        for kind in out:
            for e in t.get(kind, []):
                # a needle's text (vt: assignment / hop); the canonical needles' pinned noun is not text
                texts = [x for x in e[1:] if isinstance(x, str) and (kind != "needles" or "{" in x)]
                out[kind][e[0]] = " / ".join(texts)
    for e in NIAH_MULTIVALUE_QUESTIONS[phrasing_set]:
        out["questions"][e[0]] = e[1]
    return out


def normalize(text: str) -> str:
    """Wording without case, punctuation, placeholders' names and spacing: two parts that normalize alike
    are the same phrasing."""
    t = re.sub(r"\{[a-z]+\}", "X", text.lower())
    return " ".join(re.findall(r"[a-z0-9x]+", t))


def parse_task_spec(spec: str) -> tuple:
    """An evaluation task spec, TASK[.PHRASING[.HAYSTACK]] -> (task, phrasing set, haystack split).
    PHRASING: canonical (default), train or heldout; HAYSTACK: heldout (default: the held-out 5% of the
    training sources) or genre (the evaluation-only sources, data.EVAL_SOURCES). `passkey` is today's
    cell; `passkey.heldout.genre` held-out wordings in a held-out genre."""
    bits = spec.split(".")
    task = bits[0]
    phr = bits[1] if len(bits) > 1 else "canonical"
    hay = bits[2] if len(bits) > 2 else "heldout"
    if len(bits) > 3 or phr not in SETS or hay not in ("heldout", "genre"):
        raise ValueError(f"task spec {spec!r}: TASK[.canonical|train|heldout[.heldout|genre]]")
    family(task)
    return task, phr, hay


def main() -> None:
    """Print the phrasing sets (python3 -m csa2_train.phrasings, from training/)."""
    for s in SETS:
        print(f"== {s}")
        for kind, d in parts(s).items():
            for k, v in d.items():
                print(f"  {kind[:-1]:8} {k:11} {v!r}")


if __name__ == "__main__":
    main()
