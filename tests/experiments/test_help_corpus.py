"""The LibreOffice help corpus: paragraphs of real help pages, their alignment and split.

The pages in tests/data/help-pages are three real pages of each of libreoffice-help-en-us and
libreoffice-help-fr 4:7.4.7-1+deb12u14 (Debian 12; see tests/data/README.md). The download
step (apt-get download) is not tested here: it would need the network.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA_DIR

from rescorer.errors import RescorerError
from rescorer.experiments.help_corpus import (
    CorpusConfig,
    align,
    paragraphs,
    readme,
    split,
    split_key,
    word_stats,
)

PAGES = DATA_DIR / "help-pages"
EN, FR = PAGES / "en-US", PAGES / "fr"
LOAD_SAVE = "text/shared/optionen/01020000.html"


def test_a_page_gives_its_headings_and_paragraphs_with_their_ids_in_order() -> None:
    found = paragraphs(EN / LOAD_SAVE)
    assert found[:3] == [
        ("hd_id3147291", "Load/Save options"),
        ("par_id3146957", "Specifies general Load/Save settings."),
        ("hd_id3143284", "General"),
    ]
    french = dict(paragraphs(FR / LOAD_SAVE))
    assert french["hd_id3147291"] == "Options Chargement/enregistrement"


def test_a_switch_keeps_its_default_variant_and_drops_the_others(tmp_path: Path) -> None:
    """Real markup of a menu path (find_toolbar.html): macOS's variant hidden, the default's
    hidden too until the page's script shows it; a reader on Windows or Linux sees Ctrl."""
    page = tmp_path / "p.html"
    page.write_text(
        '<p id="par_1">Use <span id="s" class="switchinline"><span hidden="true" id="MACx" '
        'class="MAC"><span class="keycode">Command</span></span><span hidden="true" '
        'id="defaultx"><span class="keycode">Ctrl</span></span></span><span class="keycode">'
        ' + F</span>&nbsp;to &amp; <br>find.</p><p>no id</p><h2 id="h">Two\n  lines</h2>'
        '<p id="e"></p>',
        encoding="utf-8",
    )
    assert paragraphs(page) == [
        ("par_1", "Use Ctrl + F to & find."),
        ("h", "Two lines"),
        ("e", ""),
    ]


def test_an_unclosed_paragraph_ends_at_the_next_one(tmp_path: Path) -> None:
    page = tmp_path / "p.html"
    page.write_text('<div><p id="a">one<p id="b">two</div><p id="c">three', encoding="utf-8")
    assert paragraphs(page) == [("a", "one"), ("b", "two"), ("c", "three")]


def test_pages_align_by_file_and_id_and_drop_empty_identical_and_repeated(
    tmp_path: Path,
) -> None:
    for lang, texts in (
        ("en", ["Open", "Save", "", "PDF", "Open", "Only here"]),
        ("fr", ["Ouvrir", "Enregistrer", "Vide", "PDF", "Ouvrir (2)"]),
    ):
        folder = tmp_path / lang / "text" / "a"
        folder.mkdir(parents=True)
        body = "".join(f'<p id="p{i}">{t}</p>' for i, t in enumerate(texts))
        (folder / "x.html").write_text(body, encoding="utf-8")
    (tmp_path / "en" / "text" / "a" / "only-en.html").write_text('<p id="p0">Lost</p>')
    result = align(tmp_path / "en", tmp_path / "fr")
    assert result.files == ["text/a/x.html"]
    assert result.pairs == [
        ("Open", "Ouvrir", "text/a/x.html#p0"),
        ("Save", "Enregistrer", "text/a/x.html#p1"),
    ]
    assert result.candidates == 5  # p5 has no French
    assert result.dropped == {"empty": 1, "identical": 1, "repeated source": 1}


def test_the_real_pages_align() -> None:
    result = align(EN, FR)
    assert len(result.files) == 3
    sources = [p[0] for p in result.pairs]
    assert len(sources) == len(set(sources))
    assert all(src and tgt and src != tgt for src, tgt, _ in result.pairs)
    assert ("General", "Général", f"{LOAD_SAVE}#hd_id3143284") in result.pairs


def test_the_split_is_by_distinct_source_seeded_and_disjoint() -> None:
    pairs = [(f"Source {i % 40}", f"cible {i}", f"o{i}") for i in range(60)]
    pairs += [("SOURCE  3", "autre", "x")]  # the same source for the split
    parts = split(pairs, dev=5, test=10, seed=7)
    assert parts == split(pairs, dev=5, test=10, seed=7)
    keys = {name: {split_key(p[0]) for p in part} for name, part in parts.items()}
    assert len(keys["test"]) == 10 and len(keys["dev"]) == 5 and len(keys["train"]) == 25
    assert not (keys["test"] & keys["dev"] or keys["test"] & keys["train"])
    assert not keys["dev"] & keys["train"]
    assert sum(len(p) for p in parts.values()) == len(pairs)
    assert parts != split(pairs, dev=5, test=10, seed=8)
    with pytest.raises(RescorerError, match="leave none"):
        split(pairs, dev=20, test=20, seed=7)


def test_the_readme_states_provenance_licence_and_statistics(tmp_path: Path) -> None:
    stats = word_stats(["a b c", "d", "e f g h i j"])
    assert stats["lines"] == 3 and stats["words"] == 10 and stats["median"] == 3
    record = {
        "packages": [
            {
                "name": "libreoffice-help-en-us",
                "version": "4:7.4.7-1",
                "deb": "a.deb",
                "sha256": "ab" * 32,
            },
            {
                "name": "libreoffice-help-fr",
                "version": "4:7.4.7-1",
                "deb": "b.deb",
                "sha256": "cd" * 32,
            },
        ],
        "pages": 3,
        "candidates": 36,
        "distinct_sources": 23,
        "dropped": {"empty": 13, "identical": 1, "repeated source": 0},
        "kept": 22,
        "all": {"en": stats, "fr": stats},
        "sets": {name: {"en": stats, "fr": stats} for name in ("train", "dev", "test")},
    }
    text = readme(CorpusConfig(out=tmp_path), record)
    assert "MPL-2.0" in text and "ab" * 32 in text and "4:7.4.7-1" in text
    assert "| train.en | 3 | 10 | 3 |" in text
    assert "the first 5,000 to test" in text and "test has 3 lines, dev 3." in text
    assert "apt-get download" in text and "dpkg -x" in text
    json.dumps(record)  # what corpus.json holds is JSON
