"""CPU tests of the task phrasings, their train / held-out split and the corpus splits.

    cd training && python3 -m unittest discover -s tests -v

Needs numpy (csa2_train.data); no tokenizer, no torch. About a second."""

import hashlib
import random
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
from csa2_train import data, phrasings  # noqa: E402

CORPUS = HERE / "data" / "corpus"
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]


def synth_text(seed: int, n: int) -> str:
    r = random.Random(seed)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima", "mike"]
    return "\n".join(" ".join(" ".join(r.choice(words) for _ in range(r.randint(4, 12))).capitalize() + "." for _ in range(5)) for _ in range(n))


def synth_tasks() -> data.TextTasks:
    return data.TextTasks({"train": [synth_text(1, 400), synth_text(2, 300)], "heldout": [synth_text(3, 200)], "genre": [synth_text(4, 200)]}, WORDS)


class SplitTest(unittest.TestCase):
    def test_no_overlap_between_train_and_heldout(self):
        tr, ho = phrasings.parts("train"), phrasings.parts("heldout")
        for kind in tr:
            self.assertFalse(set(tr[kind]) & set(ho[kind]), kind)  # ids
            self.assertFalse(set(tr[kind].values()) & set(ho[kind].values()), kind)  # texts
            ntr = {phrasings.normalize(t) for t in tr[kind].values()}
            nho = {phrasings.normalize(t) for t in ho[kind].values()}
            self.assertFalse(ntr & nho, kind)  # same wording up to case / punctuation / placeholders
            self.assertTrue(ho[kind], kind)  # every kind has held-out parts

    def test_canonical_is_part_of_train(self):
        can, tr = phrasings.parts("canonical"), phrasings.parts("train")
        for kind in can:
            for k, v in can[kind].items():
                self.assertEqual(tr[kind].get(k), v, k)

    def test_questions_are_one_line_with_an_answer_prefix(self):
        for s in phrasings.SETS:
            for k, q in phrasings.parts(s)["questions"].items():
                self.assertTrue(q.startswith("\n"), k)
                self.assertNotIn("\n", q[1:], k)
                self.assertFalse(q.endswith(" "), k)  # the answer brings its leading space
        for s in phrasings.SETS:
            for k, i in phrasings.parts(s)["intros"].items():
                self.assertTrue(i == "" or (i.endswith("\n") and "\n" not in i[:-1]), k)

    def test_draws_stay_in_their_set_and_cover_it(self):
        for s in ("train", "heldout"):
            allowed = set()
            for d in phrasings.parts(s).values():
                allowed |= set(d)
            allowed_nouns = set(phrasings.parts(s)["nouns"].values())
            seen = set()
            rng = random.Random(7)
            for _ in range(3000):
                task = rng.choice(data.TASKS)
                p = phrasings.draw(rng, task, s)
                self.assertEqual(p.set, s)
                ids, noun = (p.ids, None) if task == "vt" else (p.ids[:3], p.ids[3])
                self.assertTrue(set(ids) <= allowed, (s, ids))
                if noun is not None and p.needle.count("{noun}"):
                    self.assertIn(noun, allowed_nouns)
                seen |= set(ids)
            want = set()
            for kind in ("intros", "needles", "questions"):
                want |= set(phrasings.parts(s)[kind])
            self.assertEqual(seen, want, s)  # every part gets drawn

    def test_canonical_takes_nothing_from_the_stream(self):
        rng = random.Random(3)
        before = rng.getstate()
        for task in data.TASKS:
            phrasings.draw(rng, task, "canonical")
        self.assertEqual(rng.getstate(), before)

    def test_task_spec(self):
        self.assertEqual(phrasings.parse_task_spec("passkey"), ("passkey", "canonical", "heldout"))
        self.assertEqual(phrasings.parse_task_spec("niah_single.heldout"), ("niah_single", "heldout", "heldout"))
        self.assertEqual(phrasings.parse_task_spec("vt.train.genre"), ("vt", "train", "genre"))
        for bad in ("passkey.other", "passkey.heldout.train", "nope", "passkey.heldout.genre.x"):
            with self.assertRaises(ValueError):
                phrasings.parse_task_spec(bad)


class TaskTextTest(unittest.TestCase):
    def setUp(self):
        self.tt = synth_tasks()

    def test_canonical_samples_unchanged(self):
        """sha256 over canonical task texts, as the code before the phrasing sets produced them."""
        h = hashlib.sha256()
        for task in data.TASKS:
            for i in range(20):
                p, a = self.tt.task_text(random.Random(i), task, 2500, "heldout" if i % 2 else "train", None if i % 3 else 0.25)
                h.update(p.encode())
                h.update(a.encode())
        self.assertEqual(h.hexdigest(), "de3fe122dc4cb62a73b926ff87dcbfdc8574d68e548dd612e5571ad84fde93ef")

    def test_deterministic_by_seed(self):
        for s in phrasings.SETS:
            for task in data.TASKS:
                a = self.tt.task_text(random.Random(11), task, 2000, "heldout", None, s)
                b = self.tt.task_text(random.Random(11), task, 2000, "heldout", None, s)
                self.assertEqual(a, b)
        outs = {self.tt.task_text(random.Random(i), "passkey", 2000, "heldout", 0.5, "train")[0].split("\n")[-1] for i in range(40)}
        self.assertGreater(len(outs), 10)  # the wording varies with the seed

    def test_answers_in_the_haystack(self):
        for s in phrasings.SETS:
            for split in ("train", "heldout", "genre"):
                for task in data.TASKS:
                    for i in range(25):
                        prompt, answer = self.tt.task_text(random.Random(i), task, 1500, split, None, s)
                        body, question = prompt[: prompt.rfind("\n")], prompt[prompt.rfind("\n") + 1 :]
                        self.assertTrue(answer.startswith(" "))
                        self.assertNotIn("{", prompt)  # every placeholder filled
                        if task == "passkey":
                            self.assertIn(answer.strip(), body)
                        elif task == "vt":
                            for name in answer.split():
                                self.assertIn(name, body)
                        else:
                            vals = answer.replace(", and ", ", ").strip().split(", ")
                            self.assertEqual(len(vals), 4 if task == "niah_multivalue" else 1)
                            for v in vals:
                                self.assertIn(v, body)
                                self.assertEqual(body.count(v), 1)
                            key = [w for w in question.replace("?", " ").split() if "-" in w and w.split("-")[0] in WORDS]
                            self.assertTrue(key, question)
                            # the value's needle names the asked key
                            for v in vals:
                                sent = [x for x in body.split(". ") if v in x]
                                self.assertTrue(any(key[0].rstrip(".,") in x for x in sent), (s, task, sent, key))

    def test_heldout_samples_use_heldout_wording_only(self):
        tr = phrasings.parts("train")
        train_texts = {phrasings.normalize(q.strip()) for q in tr["questions"].values()}
        for task in data.TASKS:
            for i in range(20):
                prompt, _ = self.tt.task_text(random.Random(i), task, 1500, "heldout", None, "heldout")
                q = prompt[prompt.rfind("\n") + 1 :]
                self.assertNotIn(phrasings.normalize(q), train_texts)


class CorpusSplitTest(unittest.TestCase):
    def test_sources_and_genre(self):
        self.assertFalse(set(data.EVAL_SOURCES) & set(data.TRAIN_SOURCES_ALL))
        with self.assertRaises(ValueError):
            data.load_texts(CORPUS, sources=("austen", "jargon"), eval_sources=("jargon",))

    @unittest.skipUnless((CORPUS / "jargon.txt.gz").exists(), "corpus files")
    def test_load_texts(self):
        t = data.load_texts(CORPUS, sources=("mobydick", "kjv"), heldout_sources=("mobydick",), eval_sources=data.EVAL_SOURCES)
        self.assertEqual(len(t["train"]), 2)
        self.assertEqual(len(t["heldout"]), 1)
        self.assertEqual(len(t["genre"]), 2)
        whole = data.read_source(CORPUS, "mobydick")
        self.assertEqual(t["train"][0] + "\n" + t["heldout"][0], whole)  # 95 / 5, nothing lost, no overlap
        self.assertNotIn("genre", data.load_texts(CORPUS))  # the default: the served model's three sources only


if __name__ == "__main__":
    unittest.main()
