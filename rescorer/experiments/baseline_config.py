"""The Moses baseline's settings (:class:`BaselineConfig`) and the checks of them and of the
corpus that run before any step: counts no step could use, and corpus files that are not
regular files (each named for what it is) or not parallel."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from rescorer.errors import RescorerError
from rescorer.experiments.tools import MosesTools

SETS = ("train", "dev", "test")
DEFAULT_MERT_SEED = 1  # a rebuild of the same bitext tunes the same weights (issue 35)


@dataclass(frozen=True)
class BaselineConfig:
    """What the baseline is built from and how."""

    corpus: Path  # folder with train/dev/test.{src,tgt}
    work: Path
    moses: Path
    src: str = "en"
    tgt: str = "fr"
    tokenized: bool = False  # the corpus is tokenised and lowercased already
    max_length: int = 80  # clean-corpus-n's limit (tokens, both sides)
    lm_order: int = 5
    discount_fallback: bool = False  # lmplz's --discount_fallback from the start (else on demand)
    max_phrase_length: int = 7
    cube_pruning: bool = True
    max_iterations: int = 15
    dev_lines: int | None = None  # tune on the first N dev lines
    threads: int = 2
    mert_seed: int | None = DEFAULT_MERT_SEED  # None: mert's own, from the system clock


def check_counts(cfg: BaselineConfig) -> None:
    """Refuse counts no step could use, before any step runs (the scripts refuse them at
    parse time too)."""
    counts = {"--max-iterations": cfg.max_iterations, "--threads": cfg.threads}
    counts |= {"--max-length": cfg.max_length, "--max-phrase-length": cfg.max_phrase_length}
    counts |= {"--lm-order": cfg.lm_order}
    if cfg.dev_lines is not None:
        counts["--dev-lines"] = cfg.dev_lines
    for option, value in counts.items():
        if value < 1:
            why = " (mert-moses.pl reads 0 as no limit)" if option == "--max-iterations" else ""
            raise RescorerError(f"{option} {value}: expected 1 or more{why}")


def corpus_file_problem(path: Path) -> str | None:
    """What keeps ``path`` from being read as a corpus file (read more than once: a regular
    file), or None: missing, a folder, a FIFO, a device ... each by name."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"cannot read it: {exc.strerror}"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder, not a file"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe), not a file: every corpus file is read more than once"
    return "not a regular file (a device or socket)"


def check_inputs(cfg: BaselineConfig, tools: MosesTools) -> None:
    """Refuse what no step could use, before the first runs."""
    check_counts(cfg)
    tools.check()
    needed = [
        tools.root / "scripts" / "tokenizer" / "tokenizer.perl",
        tools.root / "scripts" / "tokenizer" / "lowercase.perl",
        tools.root / "scripts" / "training" / "clean-corpus-n.perl",
        tools.root / "scripts" / "training" / "train-model.perl",
        tools.root / "bin" / "lmplz",
        tools.root / "bin" / "build_binary",
        tools.root / "mgiza" / "mgiza",
    ]
    for path in needed:
        if not path.exists():
            raise RescorerError(f"--moses {tools.root}: {path} is missing (Moses' training tools)")
    for part in SETS:
        lengths = []
        for lang in (cfg.src, cfg.tgt):
            path = cfg.corpus / f"{part}.{lang}"
            problem = corpus_file_problem(path)
            if problem is not None:
                raise RescorerError(f"{path}: {problem} (the corpus needs {part}.{lang})")
            with open(path, "rb") as f:
                lengths.append(sum(1 for _ in f))
        if lengths[0] != lengths[1]:
            raise RescorerError(
                f"{cfg.corpus}: {part}.{cfg.src} has {lengths[0]} lines, {part}.{cfg.tgt} has "
                f"{lengths[1]}: expected parallel files"
            )
        if lengths[0] == 0:
            raise RescorerError(f"{cfg.corpus / f'{part}.{cfg.src}'}: empty")
