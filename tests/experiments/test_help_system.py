"""scripts/help_system.py: the help-prose system from Debian's packages by one command.

The packages are two small .deb files built here with dpkg-deb from the three real help pages
of tests/data/help-pages (the network's `apt-get download` is not tested: the corpus step takes
packages already in WORK/corpus/debs, as after a first download). The baseline steps run the
real Moses tools; skipped when ../shared/tools/moses or dpkg-deb is absent.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA_DIR, MOSES, ROOT

from rescorer.moses.ini import read_ini

SCRIPT = ROOT / "scripts" / "help_system.py"
PACKAGES = {"libreoffice-help-en-us": "en-US", "libreoffice-help-fr": "fr"}

pytestmark = [
    pytest.mark.skipif(
        not (MOSES / "bin" / "moses").exists() or not (MOSES / "mgiza" / "mgiza").exists(),
        reason=f"the real Moses toolkit with MGIZA++ is not at {MOSES} (../shared/tools/moses)",
    ),
    pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed"),
]


def make_debs(folder: Path) -> None:
    """One package per language, laid out as Debian's: usr/share/libreoffice/help/LANG/text."""
    folder.mkdir(parents=True)
    for name, lang in PACKAGES.items():
        stage = folder.parent / f"stage-{lang}"
        shutil.copytree(DATA_DIR / "help-pages" / lang, stage / "usr/share/libreoffice/help" / lang)
        (stage / "DEBIAN").mkdir()
        (stage / "DEBIAN" / "control").write_text(
            f"Package: {name}\nVersion: 1:0.1-test\nArchitecture: all\n"
            "Maintainer: rescorer tests <tests@example.org>\n"
            "Description: three real LibreOffice help pages (tests/data/help-pages)\n"
        )
        deb = folder / f"{name}_0.1-test_all.deb"
        argv = ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(stage), str(deb)]
        subprocess.run(argv, check=True, capture_output=True)


def run(work: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(SCRIPT), "--work", str(work), "--moses", str(MOSES)]
    more = ["--dev", "3", "--test", "3", "--max-iterations", "2", "--mert-seed", "1"]
    return subprocess.run(
        [*argv, *more, "--threads", "2", *flags], capture_output=True, text=True, cwd=ROOT
    )


def test_one_command_builds_the_corpus_and_the_tuned_system_and_goes_on_where_it_stopped(
    tmp_path: Path,
) -> None:
    work = tmp_path / "help"
    make_debs(work / "corpus" / "debs")
    proc = run(work)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((work / "corpus" / "corpus.json").read_text())
    assert [p["name"] for p in record["packages"]] == list(PACKAGES)
    assert {p["version"] for p in record["packages"]} == {"1:0.1-test"}
    assert record["kept"] == 22  # the three pages' pairs (tests/experiments/test_help_corpus.py)
    sets = {
        part: (work / "corpus" / f"{part}.en").read_text().splitlines() for part in record["sets"]
    }
    assert (len(sets["dev"]), len(sets["test"]), len(sets["train"])) == (3, 3, 16)
    # the baseline was built from that corpus: its system's test set is the corpus's, tokenised
    system = work / "baseline" / "system"
    assert len((system / "test.en").read_text().splitlines()) == 3
    assert (system / "moses.ini").is_file() and read_ini(str(system / "moses.ini")).weights()
    assert "system folder: " + str(system) in proc.stderr
    assert "test_bleu" in json.loads(proc.stdout)

    # the same command again: every step is skipped, the corpus is not rebuilt
    built = (work / "corpus" / "train.en").stat().st_mtime_ns
    again = run(work)
    assert again.returncode == 0, again.stderr
    steps = ["corpus", "prepare", "lm", "train", "tune", "system", "evaluate"]
    assert again.stderr.count("skipped") == len(steps), again.stderr
    assert (work / "corpus" / "train.en").stat().st_mtime_ns == built

    # other settings on the same work folder are refused: the baseline came from this corpus
    other = run(work, "--test", "4")
    assert other.returncode == 1
    assert f"help-system: error: {work / 'corpus'} was built with" in other.stderr
    assert "use another work folder" in other.stderr
    assert (work / "corpus" / "train.en").stat().st_mtime_ns == built

    # a corpus that help_corpus.py built without this command (no step record): its
    # corpus.json says how, and other settings are refused all the same
    (work / "corpus" / "done.json").unlink()
    older = run(work, "--test", "4")
    assert older.returncode == 1
    assert f"help-system: error: {work / 'corpus'} was built with" in older.stderr
    assert "'test': 3" in older.stderr and "'test': 4" in older.stderr
    assert (work / "corpus" / "train.en").stat().st_mtime_ns == built
