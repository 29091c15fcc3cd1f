"""The LibreOffice help corpus: paragraphs of real help pages, their alignment and split.

The pages in tests/data/help-pages are three real pages of each of libreoffice-help-en-us and
libreoffice-help-fr 4:7.4.7-1+deb12u14 (Debian 12; see tests/data/README.md). The download
step (apt-get download) is not tested here: it would need the network.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA_DIR, ROOT

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
from rescorer.experiments.processes import descendants

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


# ------------------------------------------------------------------ the script, end to end
SCRIPT = ROOT / "scripts" / "help_corpus.py"
needs_dpkg = pytest.mark.skipif(
    shutil.which("dpkg") is None or shutil.which("dpkg-deb") is None,
    reason="dpkg and dpkg-deb (Debian's) are needed to build and unpack the test packages",
)


def help_debs(debs: Path) -> None:
    """Two real Debian packages of the help pages in tests/data/help-pages (en-US and fr),
    built with dpkg-deb into ``debs``, where help_corpus finds them instead of downloading."""
    debs.mkdir(parents=True, exist_ok=True)
    for name, lang in (("libreoffice-help-en-us", "en-US"), ("libreoffice-help-fr", "fr")):
        tree = debs.parent / f"tree-{lang}"
        shutil.copytree(PAGES / lang, tree / "usr" / "share" / "libreoffice" / "help" / lang)
        (tree / "DEBIAN").mkdir()
        (tree / "DEBIAN" / "control").write_text(
            f"Package: {name}\nVersion: 1:7.4-test\nArchitecture: all\n"
            "Maintainer: tests <tests@example.org>\nDescription: test pages\n"
        )
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree),
             str(debs / f"{name}_7.4-test_all.deb")],
            check=True, capture_output=True,
        )  # fmt: skip
        shutil.rmtree(tree)


def help_corpus(
    out: Path | str, *flags: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "-o", str(out), *flags],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(
    "flags", [("--dev", "-1"), ("--test", "-3"), ("--dev", "0"), ("--test", "0")]
)
def test_an_impossible_set_size_is_refused_at_parse_time(tmp_path: Path, flags: tuple) -> None:
    """Issue 58.8: --dev -1 wrote a corpus whose test and train overlap (a negative slice)."""
    proc = help_corpus(tmp_path / "out", *flags)
    assert proc.returncode == 2, proc.stderr
    said = f"Invalid value for '{flags[0]}': {flags[1]} is not in the range 1<=x<=10000000."
    assert said in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_the_split_refuses_sizes_that_leave_no_train_or_are_negative() -> None:
    pairs = [(f"Source {i}", f"cible {i}", f"o{i}") for i in range(30)]
    for dev, test in ((-1, 5), (5, -1), (0, 5)):
        with pytest.raises(RescorerError, match="expected 1 or more"):
            split(pairs, dev=dev, test=test, seed=1)
    with pytest.raises(RescorerError, match=r"--dev 20 \+ --test 10 .* leave none of the 30"):
        split(pairs, dev=20, test=10, seed=1)


def test_every_unusable_out_folder_gets_one_error_line_before_any_work(tmp_path: Path) -> None:
    """Issue 58.10: each of these gave a traceback (after downloading, for some)."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = {
        afile: f"--out {afile}: not a folder",
        afile / "sub": f"--out {afile / 'sub'}: {afile} is not a folder",
        Path("/proc/rescorer-test/out"): "--out /proc/rescorer-test/out: cannot write there:",
    }
    if os.geteuid() != 0:  # root writes in a read-only-mode folder
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        cases[locked] = f"--out {locked}: cannot write there: Permission denied"
    for out, expected in cases.items():
        proc = help_corpus(out, "--dev", "2", "--test", "2")
        assert proc.returncode == 1, (out, proc.stderr)
        assert proc.stderr.splitlines() == [proc.stderr.splitlines()[0]], proc.stderr
        assert proc.stderr.startswith(f"help-corpus: error: {expected}"), proc.stderr
    assert afile.read_text() == "x"


@pytest.mark.slow
@needs_dpkg
def test_the_corpus_builds_from_packages_and_an_interrupted_dpkg_leaves_no_process(
    tmp_path: Path,
) -> None:
    """Issue 58.11: SIGTERM while ``dpkg -x`` runs left it running (the script died at once),
    and a re-run removing the folder it was writing in failed with a traceback. Here dpkg is
    slow (a wrapper in PATH that sleeps, then runs the real dpkg): the signal ends it and what
    it started, the script says so in one line and exits 143; the re-run builds the corpus."""
    out = tmp_path / "out"
    help_debs(out / "debs")
    slow = tmp_path / "slow-bin"
    slow.mkdir()
    mark = tmp_path / "dpkg.pid"
    wrapper = slow / "dpkg"
    wrapper.write_text(f'#!/bin/sh\necho $$ > {mark}\nsleep 60\nexec {shutil.which("dpkg")} "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{slow}:{os.environ['PATH']}"}
    for signum, status in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        mark.unlink(missing_ok=True)
        argv = [sys.executable, str(SCRIPT), "-o", str(out), "--dev", "2", "--test", "2"]
        proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        deadline = time.monotonic() + 120
        while not mark.is_file() or not mark.read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, "dpkg never started"
            time.sleep(0.1)
        dpkg = int(mark.read_text())
        children = [dpkg, *descendants(dpkg)]
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == status, err
        which = signal.Signals(signum).name
        assert err.splitlines()[-1] == (
            f"help-corpus: interrupted by {which}; the finished steps in {out} are kept: "
            "run the same command again to go on"
        ), err
        assert "Traceback" not in err
        assert not [pid for pid in children if alive(pid)], "a child outlived the script"
    done = help_corpus(out, "--dev", "2", "--test", "2")
    assert done.returncode == 0, done.stderr
    assert (out / "train.en").is_file() and (out / "corpus.json").is_file()
    record = json.loads((out / "corpus.json").read_text())
    assert record["pages"] == 3 and record["kept"] == 22
    assert not (out / "unpacked").exists()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False
