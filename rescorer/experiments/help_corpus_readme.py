"""The help corpus's README.md: what the text is, how it was made (the record's counts), its
licence and its statistics (:func:`readme`, written by :func:`help_corpus.build`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rescorer.experiments.help_corpus import CorpusConfig


def _stats_row(name: str, s: dict[str, float]) -> str:
    return (
        f"| {name} | {s['lines']:,} | {s['words']:,} | {s['median']:g} | {s['mean']:g} | "
        f"{s['p90']:g} | {100 * s['over_32']:.1f}% |"
    )


def readme(config: CorpusConfig, record: dict[str, Any]) -> str:
    """The corpus README: what the text is, how it was made, its licence and statistics."""
    pk, dropped, every, sets = (record[k] for k in ("packages", "dropped", "all", "sets"))
    s, t = config.src, config.tgt
    rows = [_stats_row(f"all kept, {s}", every[s]), _stats_row(f"all kept, {t}", every[t])]
    for name in ("train", "dev", "test"):
        rows += [_stats_row(f"{name}.{s}", sets[name][s]), _stats_row(f"{name}.{t}", sets[name][t])]
    packages = "\n".join(
        f"| `{p['name']}` | `{p['version']}` | `{p['deb']}` | `{p['sha256']}` |" for p in pk
    )
    return f"""# {s}-{t} LibreOffice help: a parallel corpus of software documentation prose

Made by `scripts/help_corpus.py` (rescorer.experiments.help_corpus) from Debian's packages;
nothing here was edited by hand. The text is LibreOffice 7's user help: how-to pages and
reference pages of Writer, Calc, Impress, Draw, Base, Math and the shared dialogs, written in
English by LibreOffice's documentation team and translated paragraph by paragraph by its
localisation teams. Paragraphs are full sentences of instructional prose ("To insert a
table, choose ..."), headings and table cells; a line is one paragraph, so it may hold
several sentences.

## Provenance

| package | version | file | sha256 |
|---|---|---|---|
{packages}

Rebuild: `python scripts/help_corpus.py -o FOLDER --src-package {pk[0]["name"]} \\
--tgt-package {pk[1]["name"]} --src {s} --tgt {t} --dev {config.dev} --test {config.test} \\
--seed {config.seed}` (another help language: its package, e.g. `libreoffice-help-de`).
The packages are fetched with `apt-get download` and unpacked with `dpkg -x`; nothing is
installed. `files.sha256` lists the sha256 of each of the {2 * int(record["pages"]):,} HTML
pages used ({record["pages"]:,} per language; its own sha256 is in `corpus.json`).

1. Every `<p>` and `<h1>`..`<h6>` element with an `id` attribute of every page present in both
   languages; its text as a Windows or Linux reader sees it (of the variants a page's script
   switches between, the `default` one: "Tools - Options", "Ctrl"; the macOS and per-module
   variants left out); character references decoded; white space (NBSP and the other Unicode spaces
   too) collapsed to one space.
2. Pairs aligned by (page, id, occurrence of the id in the page): {record["candidates"]:,}
   candidate pairs, {record["distinct_sources"]:,} distinct non-empty {s} paragraphs.
3. Dropped: {dropped["empty"]:,} with an empty side, {dropped["identical"]:,} whose two sides
   are identical (code, names, numbers), {dropped["repeated source"]:,} whose {s} side came
   before (the first wins, pages in sorted order). Kept: {record["kept"]:,} pairs.
4. Split by distinct source (lowercased, spaces collapsed), shuffled with Python's
   `random.Random({config.seed})`: the first {config.test:,} to test, the next {config.dev:,}
   to dev, the rest to train, every pair with its source. A distinct source can be several
   paragraphs that differ only in case or spacing:
   test has {sets["test"][s]["lines"]:,} lines, dev {sets["dev"][s]["lines"]:,}.
   `*.origin` gives each line's page and id.

Tokenising (Moses' `tokenizer.perl`), lowercasing and `clean-corpus-n.perl` are the
baseline's steps (`scripts/baseline.py`), not this folder's: these files are raw text.

## Statistics (words split on spaces, before tokenising)

| set | lines | words | median | mean | 90th pct | over 32 words |
|---|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

## Licence

The help text is part of LibreOffice: Mozilla Public License 2.0 (MPL-2.0), some files
incorporating Apache-2.0 material (the packages' `/usr/share/doc/*/copyright`: "Copyright
2000, 2010 Oracle and/or its affiliates. Copyright (c) 2000, 2010 LibreOffice contributors
and/or their affiliates"). The derived corpus is distributed under the same terms; this
folder is rebuilt by the script and not committed.
"""
