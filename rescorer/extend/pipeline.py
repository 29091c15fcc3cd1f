"""``rescorer extend``: the streamed job (:mod:`rescorer.job.run`) with generation plugged in.

What it does with each chunk (:class:`Extending`, the job's
:class:`~rescorer.job.run.ChunkWork`):

- a worker groups the chunk's lines by source phrase, with the targets each already has, and
  marks the sources to generate for (all, or the ``--input`` n-grams)
  (:func:`~rescorer.extend.stages.parse_chunk`);
- the main process runs the batched beam search of the first ``-m`` model (forward) over those
  sources (:func:`~rescorer.extend.beam.beam_search_batched`), with ``--samples`` adds the
  distinct finished samples of the same model (:func:`~rescorer.model.sampling.sample_phrases`;
  each source phrase's draws come from a stream of its own, seeded by ``--seed`` and the
  phrase's CRC-32, so they do not depend on chunks, shards or ``--resume``), drops the targets
  the table has, scores the new pairs with every ``-m`` model exactly as ``rescorer score``
  scores a pair (:class:`~rescorer.score.scorer.Scorer`), and gives them their features
  (:mod:`~rescorer.extend.features`);
- a worker writes the chunk: the table's lines with the provenance column and the new lines
  among them in byte order (fill-up), or the new lines alone (second table).

Everything else (chunks, lock, ``OUT.partial`` and its record, ``--resume``, shards and their
manifests) is the job's, as for ``score``.
"""

from __future__ import annotations

import math
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rescorer.constants import FORWARD
from rescorer.errors import RescorerError
from rescorer.extend.beam import NotFiniteError, beam_search_batched
from rescorer.extend.checks import (
    fill_up_score_count,
    refuse_changed_side_inputs,
    side_input_digests,
    unlearned,
)
from rescorer.extend.config import FILL_UP, ExtendConfig, ExtendStats
from rescorer.extend.features import Layout, layout_for, pair_scores
from rescorer.extend.stages import ExtendChunk, format_chunk, init_worker, new_line, parse_chunk
from rescorer.io.inputs import display_name
from rescorer.job.run import StreamedJob
from rescorer.model.sampling import sample_phrases
from rescorer.moses.lex import LexicalTable, lexical_weights, read_lex
from rescorer.score.config import chunk_bytes_for, input_chunks, resolve_workers
from rescorer.score.pairs import GroupedPairsBuilder, encode_inverse


def extend_table(
    table: str, model_dirs: Sequence[str], out: str, config: ExtendConfig
) -> ExtendStats:
    """Write ``out``: the new pairs the first model proposes for ``table``'s source phrases,
    in ``config.form`` (module docstring). Raises InputError at the first malformed line
    (unless ``skip_bad_lines``), leaving no output."""
    from rescorer.cpus import choose_threads
    from rescorer.device import resolve_device, resolve_precision, set_threads
    from rescorer.model.checkpoint import load_model_dir
    from rescorer.moses.filter import input_ngrams
    from rescorer.score.scorer import Scorer

    threads = set_threads(choose_threads(config.threads))
    with StreamedJob("extend", table, out, config, model_dirs) as job:  # checks first
        if not model_dirs:
            raise RescorerError("extend: no model given (-m)")
        num_scores = fill_up_score_count(table, job.regular) if config.form == FILL_UP else None
        config = replace(config, side_inputs=side_input_digests(config))
        if config.resume:
            refuse_changed_side_inputs(out, config.side_inputs)
        lex: tuple[LexicalTable, LexicalTable] | None = None
        if config.lex_f2e is not None and config.lex_e2f is not None:
            lex = (read_lex(config.lex_f2e), read_lex(config.lex_e2f))
        wanted = frozenset(input_ngrams(config.input)) if config.input is not None else None
        device = resolve_device(config.device)
        precision = resolve_precision(config.precision, device, "score")
        loaded = [load_model_dir(folder, device=device) for folder in model_dirs]
        if loaded[0].direction != FORWARD:
            raise RescorerError(
                f"{model_dirs[0]}: an inverse model; the first -m generates the targets, so it "
                "must be a forward one (train without --direction inverse)"
            )
        layout = layout_for(num_scores, len(loaded), config.form == FILL_UP, lex is not None)
        batch_tokens = 4096 if device.type == "cpu" else 65536
        chunk_bytes = chunk_bytes_for(config.chunk_bytes, device)
        chunks = input_chunks(table, chunk_bytes) if config.workers == "auto" else None
        workers = resolve_workers(config.workers, device, chunks)
        if (workers, chunk_bytes) != (config.workers, config.chunk_bytes):
            config = replace(config, workers=workers, chunk_bytes=chunk_bytes)
        stats = ExtendStats(device=str(device), precision=precision)
        batch = config.batch_sources or (256 if device.type == "cpu" else 4096)
        models = [
            _Model(
                m.model,
                m.src_vocab,
                m.tgt_vocab,
                m.direction,
                Scorer(m.model, precision, batch_tokens),
                f,
            )
            for m, f in zip(loaded, model_dirs, strict=True)
        ]
        work = Extending(models, layout, lex, config, stats, wanted, batch, display_name(table))
        # said when the input opens: how the run computes, and whether its models learned
        opening = [f"rescorer extend: {device}, {precision}, {threads.describe()}"]
        for k, (m, folder) in enumerate(zip(loaded, model_dirs, strict=True)):
            warning = unlearned(m.provenance, folder, generates=k == 0)
            if warning and config.quiet:  # a warning, said even with -q (as score says it)
                print(f"rescorer extend: {warning}", file=sys.stderr)
            elif warning:
                opening.append(f"rescorer extend: {warning}")
        options = _manifest_options(config, precision, device.type, out.endswith(".gz"))
        job.run(work, config, stats, model_dirs, options, device, opening=opening)
        return stats


def _manifest_options(
    config: ExtendConfig, precision: str, device_type: str, gz: bool
) -> dict[str, Any]:
    """Every option that changes the output's bytes, as a shard's manifest states them (merge
    refuses parts that differ): the side inputs by their content's sha256."""
    digests = dict(config.side_inputs)
    lex = [digests.get("--lex-f2e"), digests.get("--lex-e2f")]
    return {
        "form": config.form,
        "beam": config.beam,
        "samples": config.samples,
        "seed": config.seed if config.samples else None,
        "floor": config.floor,
        "lex": lex if config.lex_f2e is not None else None,
        "input": digests.get("--input") if config.input is not None else None,
        "precision": precision,
        "device_type": device_type,
        "chunk_bytes": config.chunk_bytes,
        "gzip": gz,
        "compresslevel": config.compresslevel if gz else None,
        "skip_bad_lines": config.skip_bad_lines is not None,
    }


@dataclass(frozen=True)
class _Model:
    model: Any
    src_vocab: Any
    tgt_vocab: Any
    direction: str
    scorer: Any
    folder: str  # its -m, for messages


class Extending:
    """What an ``extend`` job does with each chunk (module docstring)."""

    unit = "new pairs"
    shared_chunks = False  # its chunks cross as bytes: generating, not the host, sets its pace

    def __init__(
        self,
        models: Sequence[_Model],
        layout: Layout,
        lex: tuple[LexicalTable, LexicalTable] | None,
        config: ExtendConfig,
        stats: ExtendStats,
        wanted: frozenset[str] | None,
        batch_sources: int,
        name: str = "the table",
    ) -> None:
        self.models, self.layout, self.lex, self.config, self.stats = (
            models,
            layout,
            lex,
            config,
            stats,
        )
        self.init_worker = init_worker
        self.init_args: tuple[Any, ...] = (wanted,)
        self.parse = parse_chunk
        self.batch_sources, self.name = batch_sources, name

    def submit(self, parsed: ExtendChunk) -> list[list[str]]:
        """The new targets of each source group (the beam's, then the samples' with
        ``--samples``, minus what the table has)."""
        gen = self.models[0]
        todo = [g for g in parsed.groups if g.wanted]
        self.stats.sources += len(parsed.groups)
        self.stats.searched += len(todo)
        found: dict[int, list[str]] = {}
        for start in range(0, len(todo), self.batch_sources):
            part = todo[start : start + self.batch_sources]
            try:
                beams = beam_search_batched(
                    gen.model,
                    gen.src_vocab,
                    gen.tgt_vocab,
                    [g.src.split(" ") for g in part],
                    self.config.beam,
                )
            except NotFiniteError as exc:  # it would propose nothing, and say nothing
                group = part[exc.source]
                raise RescorerError(
                    f"{gen.folder}: the model's next-word scores for {group.src!r} "
                    f"({self.name}:{parsed.line_of(group.first)}) are {exc.value}, not finite, "
                    f"in {self.stats.precision} (weights that overflow?): it can propose no "
                    "target; rescorer score refuses the model too"
                ) from None
            drawn = self._samples([g.src for g in part])
            for group, hyps, extra in zip(part, beams, drawn, strict=True):
                targets = [" ".join(gen.tgt_vocab.decode(h.ids)) for h in hyps]
                self.stats.proposed += len(targets)
                fresh = [t for t in targets if t and t not in group.known]
                self.stats.known += len(targets) - len(fresh)
                beamed = set(targets)
                extra = [t for t in extra if t not in beamed and t not in group.known]
                self.stats.sampled += len(extra)
                found[id(group)] = fresh + extra
        return [found.get(id(g), []) for g in parsed.groups]

    def _samples(self, sources: list[str]) -> list[list[str]]:
        """Per source, the distinct targets of ``--samples`` draws that ended (EOS within the
        length limit), are not empty and have no UNK, best first; none without ``--samples``."""
        if not self.config.samples:
            return [[] for _ in sources]
        gen, k = self.models[0], self.config.samples
        # As many rows (sources x draws) at once as the beam has (sources x N): bounded memory.
        step = max(1, self.batch_sources * self.config.beam // k)
        out: list[list[str]] = []
        for start in range(0, len(sources), step):
            part = sources[start : start + step]
            drawn = sample_phrases(
                gen.model,
                gen.src_vocab,
                gen.tgt_vocab,
                part,
                num_samples=k,
                seed=self.config.seed,
                stream_ids=[zlib.crc32(s.encode("utf-8")) for s in part],
            )
            out += [[g.text for g in d if g.finished and g.words and not g.has_unk] for d in drawn]
        return out

    def collect(
        self, pending: list[list[str]], parsed: ExtendChunk, gz_level: int | None
    ) -> tuple[Callable[..., bytes], tuple[Any, ...], int]:
        pairs = [
            (g.src, t) for g, targets in zip(parsed.groups, pending, strict=True) for t in targets
        ]
        logps = self._score(pairs)  # one list per model
        self._refuse_non_finite(logps, pairs, parsed)
        new_lines: list[list[bytes]] = []
        k = 0
        for targets in pending:
            lines = []
            for _ in targets:
                src, tgt = pairs[k]
                weights = None
                alignment = ""
                if self.lex is not None:
                    weights = lexical_weights(
                        src.split(" "), tgt.split(" "), *self.lex, self.config.floor
                    )
                    alignment = " ".join(f"{j}-{i}" for j, i in weights.alignment)
                scores = pair_scores(
                    self.layout, [column[k] for column in logps], weights, self.config.floor
                )
                lines.append(new_line(src, tgt, scores, alignment))
                k += 1
            new_lines.append(lines)
        self.stats.new_pairs += len(pairs)
        spans = [(g.first, g.end) for g in parsed.groups]
        fill_up = self.layout.fill_up
        args = (parsed.lines, parsed.cuts, spans, new_lines, fill_up, gz_level)
        written = len(pairs) + (len(parsed.lines) if fill_up else 0)
        return format_chunk, (*args, parsed.last_unterminated), written

    def _refuse_non_finite(
        self, logps: list[list[float]], pairs: list[tuple[str, str]], parsed: ExtendChunk
    ) -> None:
        """The error for the first new pair a model scores nan or inf, as score's for a line:
        the model, the pair, the line of its source phrase (no nan ever reaches the output)."""
        for column, model in zip(logps, self.models, strict=True):
            bad = next((k for k, v in enumerate(column) if not math.isfinite(v)), None)
            if bad is None:
                continue
            src, tgt = pairs[bad]
            first = next(g.first for g in parsed.groups if g.src == src)
            raise RescorerError(
                f"{model.folder}: the model scores the new pair '{src} ||| {tgt}' (for "
                f"{self.name}:{parsed.line_of(first)}'s source phrase) as {column[bad]} in "
                f"{self.stats.precision}, not a finite log probability (weights that "
                "overflow?); rescorer score refuses the model too"
            )

    def _score(self, pairs: list[tuple[str, str]]) -> list[list[float]]:
        """log p of every pair under every model, as ``rescorer score`` computes it."""
        if not pairs:
            return [[] for _ in self.models]
        columns = []
        for m in self.models:
            if m.direction == FORWARD:
                builder = GroupedPairsBuilder(m.src_vocab, m.tgt_vocab)
                for src, tgt in pairs:
                    builder.add(src, tgt.split(" "))
                columns.append(m.scorer.score(builder.build()).tolist())
            else:
                grouped, order = encode_inverse(
                    m.src_vocab,
                    m.tgt_vocab,
                    [src.encode() for src, _ in pairs],
                    [tgt.encode() for _, tgt in pairs],
                )
                logp = m.scorer.score(grouped)
                in_pairs = logp.copy()
                in_pairs[order] = logp
                columns.append(in_pairs.tolist())
        return columns

    def progress(self) -> int:
        return self.stats.new_pairs
