"""A parallel corpus of prose from LibreOffice's help, rebuilt from Debian's packages.

Debian ships the help of LibreOffice as one package per language (``libreoffice-help-en-us``,
``libreoffice-help-fr``, ``libreoffice-help-de`` ...): HTML pages with the same file names in
every language, whose paragraphs and headings carry the same ``id`` in every language (they
come from one XHP source, translated paragraph by paragraph). Aligning the pages by file and id
gives paragraph pairs of real prose, without any sentence aligner.

The steps, each reproducible from the package versions recorded in ``corpus.json``:

1. ``apt-get download`` the two packages (never installed) and ``dpkg -x`` them;
2. every ``<p>``, ``<h1>``..``<h6>`` with an ``id`` of every page present in both languages,
   its text as a Windows or Linux reader sees it (of the hidden variants of a switch, the
   ``default`` one; the macOS and per-module ones left out),
   whitespace normalised (NBSP and the other Unicode spaces to one space);
3. pairs aligned by (file, id, occurrence); dropped: an empty side, both sides identical,
   a source seen before (the first occurrence wins, pages read in sorted order);
4. split by distinct normalised source into test, dev and the rest train, shuffled with a
   fixed seed.

Tokenising, lowercasing and cleaning belong to the Moses baseline (:mod:`baseline`), which
reads the raw text this module writes.
"""

from __future__ import annotations

import hashlib
import html.parser
import os
import random
import re
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rescorer.errors import RescorerError
from rescorer.experiments.help_corpus_readme import readme
from rescorer.experiments.processes import run_captured
from rescorer.io.jsonfiles import write_json
from rescorer.io.outputs import write_text

HELP_ROOT = Path("usr/share/libreoffice/help")
PARAGRAPH_TAGS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6"})
# Elements that close no tag of their own (their end tag never comes).
VOID_TAGS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)
SPACES = re.compile(r"[\s\u00a0\u2000-\u200b\u202f\u205f\u3000\ufeff]+")


class _Paragraphs(html.parser.HTMLParser):
    """The (id, visible text) of every paragraph and heading of one help page, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, str]] = []
        self._stack: list[tuple[str, bool]] = []  # (tag, hidden) of the open elements
        self._hidden = 0  # open elements with a ``hidden`` attribute
        self._current: tuple[str, list[str], int] | None = None  # (id, texts, depth)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID_TAGS:
            return
        if tag in PARAGRAPH_TAGS and self._current is not None:
            self._close_paragraph()  # HTML: a <p> ends the open one
        ident = dict(attrs).get("id")
        # A switch (``switchinline``) hides every variant and lets the page's script show one:
        # that of the reader's system or module, else ``default...``; the text keeps the
        # default (Windows and Linux menus, Ctrl) and drops the others (MAC, WRITER, ...).
        hidden = any(name == "hidden" for name, _ in attrs) and not (ident or "").startswith(
            "default"
        )
        self._stack.append((tag, hidden))
        self._hidden += hidden
        if tag in PARAGRAPH_TAGS and ident and self._current is None:
            self._current = (ident, [], len(self._stack))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID_TAGS or not any(t == tag for t, _ in self._stack):
            return  # a stray end tag
        while self._stack:
            open_tag, hidden = self._stack.pop()
            self._hidden -= hidden
            if self._current is not None and len(self._stack) < self._current[2]:
                self._close_paragraph()
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._current is not None and not self._hidden:
            self._current[1].append(data)

    def _close_paragraph(self) -> None:
        assert self._current is not None
        ident, texts, _ = self._current
        self._current = None
        self.found.append((ident, normalise("".join(texts))))

    def close(self) -> None:
        super().close()
        if self._current is not None:
            self._close_paragraph()


def normalise(text: str) -> str:
    """Every run of white space (NBSP and the other Unicode spaces too) as one space, trimmed."""
    return SPACES.sub(" ", text).strip()


def paragraphs(page: Path) -> list[tuple[str, str]]:
    """The (id, text) of each paragraph and heading of ``page``, in document order."""
    parser = _Paragraphs()
    try:
        parser.feed(page.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RescorerError(f"{page}: cannot read as UTF-8 HTML: {exc}") from exc
    parser.close()
    return parser.found


@dataclass(frozen=True)
class Package:
    """One downloaded Debian package."""

    name: str
    version: str
    deb: Path
    sha256: str


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run(argv: Sequence[str], cwd: Path | None = None) -> str:
    """``argv``'s stdout; its last line of error when it fails. Interrupted, the command and
    what it started are ended first (:func:`processes.run_captured`)."""
    try:
        proc = run_captured(argv, cwd=cwd)
    except OSError as exc:
        raise RescorerError(f"cannot run {argv[0]}: {exc.strerror}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        raise RescorerError(f"{' '.join(argv)} exited with status {proc.returncode}: {tail[0]}")
    return proc.stdout


def download(name: str, folder: Path) -> Package:
    """``apt-get download NAME`` into ``folder`` (kept when there already), never installed."""
    folder.mkdir(parents=True, exist_ok=True)
    debs = sorted(folder.glob(f"{name}_*.deb"))
    if not debs:
        _run(["apt-get", "download", name], cwd=folder)
        debs = sorted(folder.glob(f"{name}_*.deb"))
    if len(debs) != 1:
        raise RescorerError(f"{folder}: expected one {name}_*.deb, found {len(debs)}")
    deb = debs[0]
    version = _run(["dpkg-deb", "-f", str(deb), "Version"]).strip()
    return Package(name, version, deb, sha256_of(deb))


def unpack(package: Package, folder: Path) -> Path:
    """``dpkg -x`` into ``folder``; returns the package's one help language folder."""
    try:
        if folder.exists():
            shutil.rmtree(folder)  # what an interrupted dpkg -x left
        folder.mkdir(parents=True)
    except OSError as exc:
        raise RescorerError(
            f"{folder}: cannot empty it for dpkg -x: {exc.strerror} (is another run unpacking "
            "there?)"
        ) from exc
    _run(["dpkg", "-x", str(package.deb), str(folder)])
    root = folder / HELP_ROOT
    langs = [p for p in sorted(root.iterdir()) if (p / "text").is_dir()] if root.is_dir() else []
    if len(langs) != 1:
        raise RescorerError(
            f"{package.deb}: expected one help language under /{HELP_ROOT}, found "
            f"{[p.name for p in langs] or 'none'} (is {package.name} a LibreOffice help package?)"
        )
    return langs[0]


@dataclass
class Alignment:
    """The aligned pairs and what was dropped on the way."""

    pairs: list[tuple[str, str, str]] = field(default_factory=list)  # (source, target, origin)
    files: list[str] = field(default_factory=list)  # pages read, relative to the language folder
    candidates: int = 0  # (file, id) present in both languages
    dropped: dict[str, int] = field(
        default_factory=lambda: {"empty": 0, "identical": 0, "repeated source": 0}
    )
    distinct_sources: int = 0  # distinct sources among the candidates with no empty side


def pages(lang: Path) -> list[str]:
    """Every HTML page of a help language folder, relative to it, sorted."""
    return sorted(str(p.relative_to(lang)) for p in (lang / "text").rglob("*.html"))


def align(src_lang: Path, tgt_lang: Path) -> Alignment:
    """Pair the paragraphs of the pages present in both folders by (file, id, occurrence)."""
    result = Alignment()
    tgt_pages = set(pages(tgt_lang))
    seen: set[str] = set()
    sources: set[str] = set()
    for rel in pages(src_lang):
        if rel not in tgt_pages:
            continue
        result.files.append(rel)
        targets = _keyed(paragraphs(tgt_lang / rel))
        for key, src in _keyed(paragraphs(src_lang / rel)).items():
            tgt = targets.get(key)
            if tgt is None:
                continue
            result.candidates += 1
            if not src or not tgt:
                result.dropped["empty"] += 1
                continue
            sources.add(src)
            if src == tgt:
                result.dropped["identical"] += 1
            elif src in seen:
                result.dropped["repeated source"] += 1
            else:
                seen.add(src)
                ident, occurrence = key
                origin = f"{rel}#{ident}" + (f"~{occurrence}" if occurrence else "")
                result.pairs.append((src, tgt, origin))
    result.distinct_sources = len(sources)
    return result


def _keyed(found: list[tuple[str, str]]) -> dict[tuple[str, int], str]:
    """(id, how many times the id came before in the page) -> text: a page may embed the same
    paragraph twice."""
    counts: dict[str, int] = {}
    keyed: dict[tuple[str, int], str] = {}
    for ident, text in found:
        n = counts.get(ident, 0)
        counts[ident] = n + 1
        keyed[(ident, n)] = text
    return keyed


def split_key(source: str) -> str:
    """What makes two sources the same for the split: lowercased, spaces collapsed."""
    return normalise(source).lower()


def split(
    pairs: list[tuple[str, str, str]], *, dev: int, test: int, seed: int
) -> dict[str, list[tuple[str, str, str]]]:
    """Shuffle the distinct sources (by :func:`split_key`) with ``seed``: the first ``test``
    go to test, the next ``dev`` to dev, the rest to train; every pair follows its source."""
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for pair in pairs:
        groups.setdefault(split_key(pair[0]), []).append(pair)
    keys = list(groups)
    check_sizes(dev, test)
    if dev + test >= len(keys):
        raise RescorerError(
            f"--dev {dev} + --test {test} distinct sources leave none of the {len(keys)} to "
            "train: give smaller sets"
        )
    random.Random(seed).shuffle(keys)
    parts = {"test": keys[:test], "dev": keys[test : test + dev], "train": keys[test + dev :]}
    return {name: [p for k in part for p in groups[k]] for name, part in parts.items()}


def check_sizes(dev: int, test: int) -> None:
    """Refuse a dev or test set of no source (or fewer: a negative slice would put test's
    sources in train too)."""
    for option, value in (("--dev", dev), ("--test", test)):
        if value < 1:
            raise RescorerError(f"{option} {value}: expected 1 or more distinct sources")


def check_out_folder(out: Path) -> None:
    """Make ``out`` (and its parents) and write a probe in it: an unusable folder (a file, a
    path under a file, one that cannot be made or written in) is refused by one error before
    anything is downloaded."""
    if out.exists() and not out.is_dir():
        raise RescorerError(f"--out {out}: not a folder (expected a folder, made if missing)")
    above = next((p for p in out.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise RescorerError(f"--out {out}: {above} is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=out, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise RescorerError(f"--out {out}: cannot write there: {exc.strerror}") from exc


def word_stats(texts: Sequence[str]) -> dict[str, float]:
    """Words (split on spaces, before tokenising) of a list of texts."""
    lengths = sorted(len(t.split()) for t in texts)
    if not lengths:
        return {"lines": 0, "words": 0, "median": 0, "mean": 0.0, "p90": 0, "over_32": 0.0}
    return {
        "lines": len(lengths),
        "words": sum(lengths),
        "median": statistics.median(lengths),
        "mean": round(statistics.fmean(lengths), 2),
        "p90": lengths[int(0.9 * (len(lengths) - 1))],
        "over_32": round(sum(n > 32 for n in lengths) / len(lengths), 4),
    }


def write_lines(path: Path, lines: Iterator[str] | Sequence[str]) -> None:
    write_text(path, "".join(f"{line}\n" for line in lines))


@dataclass(frozen=True)
class CorpusConfig:
    out: Path
    src_package: str = "libreoffice-help-en-us"
    tgt_package: str = "libreoffice-help-fr"
    src: str = "en"
    tgt: str = "fr"
    dev: int = 1500
    test: int = 5000
    seed: int = 12345


def build(config: CorpusConfig, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Download, unpack, align, clean and split; writes the corpus, ``corpus.json`` (versions,
    checksums, counts, statistics), ``files.sha256`` and a README into ``config.out``."""
    echo = say
    out = config.out
    check_sizes(config.dev, config.test)
    check_out_folder(out)
    debs = out / "debs"
    packages = [download(name, debs) for name in (config.src_package, config.tgt_package)]
    for p in packages:
        echo(f"help-corpus: {p.name} {p.version} ({p.deb.name}, sha256 {p.sha256[:12]}...)")
    src_lang = unpack(packages[0], out / "unpacked" / config.src)
    tgt_lang = unpack(packages[1], out / "unpacked" / config.tgt)
    echo(f"help-corpus: aligning {src_lang.name} with {tgt_lang.name} ...")
    aligned = align(src_lang, tgt_lang)
    sums = []
    for rel in aligned.files:
        for lang in (src_lang, tgt_lang):
            path = lang / rel
            sums.append(f"{sha256_of(path)}  {path.relative_to(out / 'unpacked')}")
    write_lines(out / "files.sha256", sums)
    parts = split(aligned.pairs, dev=config.dev, test=config.test, seed=config.seed)
    stats: dict[str, Any] = {}
    for name, part in parts.items():
        write_lines(out / f"{name}.{config.src}", (p[0] for p in part))
        write_lines(out / f"{name}.{config.tgt}", (p[1] for p in part))
        write_lines(out / f"{name}.origin", (p[2] for p in part))
        stats[name] = {
            config.src: word_stats([p[0] for p in part]),
            config.tgt: word_stats([p[1] for p in part]),
        }
    record: dict[str, Any] = {
        "packages": [
            {"name": p.name, "version": p.version, "deb": p.deb.name, "sha256": p.sha256}
            for p in packages
        ],
        "languages": {"src": config.src, "tgt": config.tgt},
        "help_folders": [src_lang.name, tgt_lang.name],
        "pages": len(aligned.files),
        "pages_only_src": len(set(pages(src_lang)) - set(aligned.files)),
        "candidates": aligned.candidates,
        "distinct_sources": aligned.distinct_sources,
        "dropped": aligned.dropped,
        "kept": len(aligned.pairs),
        "all": {
            config.src: word_stats([p[0] for p in aligned.pairs]),
            config.tgt: word_stats([p[1] for p in aligned.pairs]),
        },
        "split": {"seed": config.seed, "dev": config.dev, "test": config.test},
        "sets": stats,
        "files_sha256": sha256_of(out / "files.sha256"),
    }
    write_json(out / "corpus.json", record)
    write_text(out / "README.md", readme(config, record))
    shutil.rmtree(out / "unpacked")
    echo(f"help-corpus: {len(aligned.pairs):,} pairs in {out} (README.md, corpus.json)")
    return record
