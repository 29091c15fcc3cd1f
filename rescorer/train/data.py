"""Training data: the held-out split by source phrase, the pair readers, the shortlists of the
training split and the unigram baseline.

An inverse model (TrainConfig.direction) learns p(source | target): its pairs are the input's
pairs with the sides swapped, so everything below (the held-out split by the conditioning
phrase, the shortlists, the encoding) reads "source" as the side the model conditions on.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

import numpy as np

from rescorer.batching import PairArrays, PairArraysBuilder
from rescorer.constants import INVERSE
from rescorer.errors import InputError, RescorerError, check
from rescorer.io.inputs import open_text
from rescorer.io.progress import Progress
from rescorer.io.table import TableReader, split_tokens
from rescorer.model.encdec import ModelConfig
from rescorer.train.config import TrainConfig
from rescorer.vocab import Vocab, build_vocabs

Source = str | tuple[str, str]  # a phrase table, or parallel (source file, target file)


# --------------------------------------------------------------------------------- data
def is_heldout(src: str, seed: int, fraction: float) -> bool:
    """Whether source phrase ``src`` belongs to the validation slice (seeded, order-free)."""
    if fraction <= 0.0:
        return False
    digest = hashlib.blake2b(f"{seed}\t{src}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2.0**64


def iter_pairs(
    source: Source,
    skip_bad_lines: str | None,
    counter: list[int],
    progress: Progress | None = None,
) -> Iterator[tuple[str, str]]:
    """(source phrase, target phrase) of every input line; counter[0] = lines read. A table
    reports to ``progress`` as it is read (not --pairs files)."""
    if isinstance(source, str):
        with TableReader(source, skip_bad_lines=skip_bad_lines, progress=progress) as reader:
            for entry in reader:
                yield entry.src, entry.tgt
            counter[0] = reader.stats.lines
        return
    src_path, tgt_path = source
    with open_text(src_path) as src_lines, open_text(tgt_path) as tgt_lines:
        lineno = 0
        # zip_longest, not zip: zip reads a line of SRC before it finds TGT at its end, and
        # that line (SRC's one extra line) was lost unseen.
        for lineno, (src, tgt) in enumerate(zip_longest(src_lines, tgt_lines), start=1):
            if src is None or tgt is None:
                longer = src_path if tgt is None else tgt_path
                raise InputError(longer, lineno, "more lines than the other --pairs file")
            for path, phrase in ((src_path, src), (tgt_path, tgt)):
                if not split_tokens(phrase):
                    raise InputError(path, lineno, "empty phrase: expected one phrase per line")
            yield src, tgt
        counter[0] = lineno


def model_pairs(
    source: Source,
    cfg: TrainConfig,
    counter: list[int],
    progress: Progress | None = None,
) -> Iterator[tuple[str, str]]:
    """(conditioning phrase, predicted phrase) of every input line in the model's direction:
    iter_pairs as they are for a forward model, swapped for an inverse one."""
    pairs = iter_pairs(source, cfg.skip_bad_lines, counter, progress)
    if cfg.direction == INVERSE:
        return ((tgt, src) for src, tgt in pairs)
    return pairs


def fingerprint(source: Source) -> dict[str, Any]:
    paths = [source] if isinstance(source, str) else list(source)
    files = []
    for path in paths:
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for block in iter(functools.partial(f.read, 1 << 20), b""):
                    digest.update(block)
        except OSError as exc:
            raise RescorerError(f"{path}: cannot read: {exc.strerror}") from exc
        size = os.path.getsize(path)
        files.append({"path": os.path.abspath(path), "bytes": size, "sha256": digest.hexdigest()})
    return {"kind": "table" if isinstance(source, str) else "pairs", "files": files}


@dataclass(frozen=True)
class TrainingData:
    train: PairArrays
    valid: PairArrays  # the scored validation subset
    lines: int
    heldout_pairs: int  # every pair of a held-out source (excluded from training)
    heldout_sources: int


def read_training_data(
    source: Source,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    cfg: TrainConfig,
    progress: Progress | None = None,
) -> TrainingData:
    """Encode every pair (EOS appended on both sides) into the training or the validation split."""
    train, valid = PairArraysBuilder(), PairArraysBuilder()
    counter = [0]
    last_src, last_held = None, False
    held: set[str] = set()  # the held-out conditioning phrases (an inverse model's are unsorted)
    for src, tgt in model_pairs(source, cfg, counter, progress):
        if src != last_src:
            last_src, last_held = src, is_heldout(src, cfg.seed, cfg.valid_fraction)
            if last_held:
                held.add(src)
        side = valid if last_held else train
        side.add(src_vocab.encode_eos(split_tokens(src)), tgt_vocab.encode_eos(split_tokens(tgt)))
    check(len(train) > 0, "no training pairs left (is --valid-fraction too large?)")
    heldout = valid.build()
    if len(heldout) > cfg.valid_max_pairs:
        rng = np.random.default_rng([cfg.seed, 1])
        pick = np.sort(rng.choice(len(heldout), size=cfg.valid_max_pairs, replace=False))
        scored = heldout.subset(pick)
    else:
        scored = heldout
    return TrainingData(train.build(), scored, counter[0], len(heldout), len(held))


#: The settings the shortlists depend on (besides the table and the sizes): ``rescorer vocab``
#: records them, ``train --vocab`` compares them with its own.
SHORTLIST_SETTINGS = ("valid_fraction", "seed", "direction")


def build_training_vocabs(
    source: Source, model_cfg: ModelConfig, cfg: TrainConfig, progress: Progress | None = None
) -> tuple[Vocab, Vocab]:
    """The shortlist rule, the one place it is written (``rescorer vocab`` and ``rescorer
    train`` both call it): the most frequent words of each side counted over the training
    split only (validation sources excluded, as ``cfg`` holds them out), each pair once, each
    side's for the model's own side (an inverse model's source shortlist: the table's
    targets)."""
    counter = [0]
    pairs = (
        (s, t)
        for s, t in model_pairs(source, cfg, counter, progress)
        if not is_heldout(s, cfg.seed, cfg.valid_fraction)
    )
    return build_vocabs(pairs, model_cfg.src_vocab_size, model_cfg.tgt_vocab_size)


def unigram_logprob_sum(train: PairArrays, valid: PairArrays, tgt_vocab: Vocab) -> float:
    """Sum over validation target tokens (EOS included) of ln p_unigram, fitted on the training
    targets with add-one smoothing over the target classes (UNK, the shortlist words, EOS)."""
    counts = np.bincount(train.tgt, minlength=tgt_vocab.num_rows).astype(np.float64)
    num_classes = len(tgt_vocab.words) + 2
    logp = np.log((counts + 1.0) / (counts.sum() + num_classes))
    return float(logp[valid.tgt].sum())
