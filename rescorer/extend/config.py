"""``rescorer extend``'s options and counts. No torch here."""

from __future__ import annotations

from dataclasses import dataclass

from rescorer.constants import DEFAULT_GZIP_LEVEL
from rescorer.errors import RescorerError
from rescorer.io.progress import DEFAULT_EVERY
from rescorer.job.stats import JobStats

FILL_UP, SECOND_TABLE = "fill-up", "second-table"
DEFAULT_FLOOR = 1e-4  # docs/extend.md §2: why this value
DEFAULT_CHECKPOINT_EVERY = 10.0


@dataclass(frozen=True)
class ExtendConfig:
    """Options of ``rescorer extend`` (flag names match field names)."""

    form: str = FILL_UP  # FILL_UP: the table plus a provenance column; SECOND_TABLE: new pairs
    beam: int = 5  # N: the beam's width and the most new targets per source
    samples: int = 0  # more draws per source (the paper's sampling); their new targets added
    seed: int = 1  # the draws' random streams: one per (seed, source phrase)
    floor: float = DEFAULT_FLOOR  # what a feature without a value gets (docs/extend.md §2)
    lex_f2e: str | None = None  # train-model.perl's model/lex.f2e: "e f w(e|f)" per line
    lex_e2f: str | None = None  # and model/lex.e2f: "f e w(f|e)"
    input: str | None = None  # only the sources that are n-grams of this file's lines
    batch_sources: int | None = None  # sources per beam batch; None: 256 on CPU, 4096 on GPU
    device: str = "auto"
    precision: str = "auto"
    chunk_bytes: int | None = None
    workers: int | str = 0
    shard: tuple[int, int] | None = None
    resume: bool = False
    compresslevel: int = DEFAULT_GZIP_LEVEL
    skip_bad_lines: str | None = None
    quiet: bool = False
    progress_every: float = DEFAULT_EVERY
    force: bool = False
    restart: bool = False  # start over, discarding an interrupted run's OUT.partial
    checkpoint_every: float = DEFAULT_CHECKPOINT_EVERY
    overlap: bool = False  # the beam runs in collect, so there is nothing to overlap with
    threads: int | None = None  # compute threads (None: rescorer.cpus.choose_threads' rule)
    # Not a flag: (flag, sha256) of each side input given (--input, --lex-*), set by
    # extend_table; in the run key, so a --resume refuses a side input changed since.
    side_inputs: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.form not in (FILL_UP, SECOND_TABLE):
            raise RescorerError(f"--form {self.form!r}: expected {FILL_UP} or {SECOND_TABLE}")
        if (self.lex_f2e is None) != (self.lex_e2f is None):
            raise RescorerError("--lex-f2e and --lex-e2f go together: give both or neither")
        if not 0 < self.floor <= 1:
            raise RescorerError(f"--floor {self.floor}: expected a probability in (0, 1]")
        if self.samples < 0:
            raise RescorerError(f"--samples {self.samples}: expected 0 or more")
        for flag, value in (("--beam", self.beam), ("--batch-sources", self.batch_sources)):
            if value is not None and value < 1:
                raise RescorerError(f"{flag} {value}: expected at least 1")


@dataclass
class ExtendStats(JobStats):
    sources: int = 0  # distinct source phrases read
    searched: int = 0  # of them, those the beam searched (all, or the --input ones)
    proposed: int = 0  # targets the beam proposed
    sampled: int = 0  # new targets from --samples: finished, no UNK, not the beam's or the table's
    known: int = 0  # of them, pairs the table already has
    new_pairs: int = 0  # pairs written
    device: str = ""
    precision: str = ""
