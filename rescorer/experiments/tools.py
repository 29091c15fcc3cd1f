"""The commands a Table 1 run starts: the prebuilt Moses toolkit's, and rescorer's own.

Moses' decoder, tuner and BLEU script are the real ones; rescorer runs with this interpreter,
the commands a user types (the package imported as the interpreter finds it outside the current
folder: :data:`LAUNCH`).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from rescorer.errors import RescorerError


@dataclass(frozen=True)
class MosesTools:
    """The prebuilt Moses toolkit: decoder, tuning binaries and Moses' scripts."""

    root: Path

    @property
    def moses(self) -> Path:
        return self.root / "bin" / "moses"

    @property
    def mertdir(self) -> Path:
        return self.root / "bin"

    @property
    def mert_moses(self) -> Path:
        return self.root / "scripts" / "training" / "mert-moses.pl"

    @property
    def multi_bleu(self) -> Path:
        return self.root / "scripts" / "generic" / "multi-bleu.perl"

    def check(self) -> None:
        for path in (self.moses, self.mertdir / "mert", self.mert_moses, self.multi_bleu):
            if not path.exists():
                raise RescorerError(f"--moses {self.root}: {path} is missing (a Moses toolkit?)")


# ``python -m rescorer`` would look for rescorer in the current folder first, where a folder
# named rescorer (a checkout's, run from its parent) shadows the installed package. This
# imports it as this interpreter does without the current folder (unless -P left it out).
LAUNCH = (
    "import sys; getattr(sys.flags, 'safe_path', 0) or sys.path[:1] != [''] or sys.path.pop(0); "
    "from rescorer.cli import main; main()"
)


def rescorer_argv(*args: str | os.PathLike[str]) -> list[str]:
    """``rescorer ...`` run by this interpreter (the same installation), whatever the
    current folder holds."""
    return [sys.executable, "-c", LAUNCH, *(os.fspath(a) for a in args)]


def multi_bleu(tools: MosesTools, ref: Path, hyp: Path) -> float:
    """BLEU by Moses' multi-bleu.perl (``BLEU = 65.56, ...``)."""
    import subprocess

    with open(hyp, "rb") as f:
        proc = subprocess.run(
            ["perl", str(tools.multi_bleu), str(ref)], stdin=f, capture_output=True, check=False
        )
    match = re.search(rb"BLEU = ([0-9.]+)", proc.stdout)
    if proc.returncode != 0 or match is None:
        raise RescorerError(f"multi-bleu.perl failed on {hyp}: {proc.stderr.decode()[-300:]}")
    return float(match.group(1))
