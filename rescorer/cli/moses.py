"""``rescorer combine``, ``filter``, ``rerank`` and ``score-nbest``: Moses integration
(``moses-ini`` is in moses_ini.py)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import click

from rescorer.cli.common import (
    device_option,
    progress_option,
    quiet_option,
    say,
    score_precision_option,
    threads_option,
    use_threads,
    user_errors,
    weight_options,
    weight_spec,
)
from rescorer.cli.ranges import Int

MAX_TOP_K = 1_000_000  # targets kept per source phrase (Moses' table-limit is 20 to 100)

if TYPE_CHECKING:
    from rescorer.moses.combine import WeightSpec

run_dir_option = click.option(
    "--run-dir",
    metavar="DIR",
    type=click.Path(exists=True, file_okay=False),
    help="The folder Moses runs the ini from: its relative paths are taken from there, as "
    "Moses takes them from its current directory [default: the ini's folder].",
)


def with_run_dir(spec: WeightSpec, run_dir: str | None) -> WeightSpec:
    """``spec`` with its ini's relative paths resolved from ``run_dir`` (--run-dir)."""
    if run_dir is None or spec.ini is None:
        return spec
    return dataclasses.replace(spec, ini=spec.ini.with_run_dir(run_dir))


@click.command()
@click.argument("table")
@click.option("-o", "--output", "out", required=True, help="Output (.gz: gzip; - stdout).")
@weight_options
@click.option("--column", "column_only", is_flag=True, help="Write only the score per line.")
@run_dir_option
@progress_option
@quiet_option
@user_errors
def combine(
    table: str, out: str, column_only: bool, progress_every: float, quiet: bool, **opts: Any
) -> None:
    """Score each pair of TABLE as Moses ranks it for table-limit (log-linear, natural log).

    Writes each line with " ||| SCORE" appended, or with --column one score per line: the
    weighted sum of ln(columns) (floored at -100), word and phrase penalties and the KenLM
    score of the target phrase alone.

    \b
    Example:
      rescorer combine model/phrase-table.gz --weights model/moses.ini -o combined.gz
    """
    from rescorer.job.clobber import refuse_clobber
    from rescorer.moses.combine import combine_table

    run_dir = opts.pop("run_dir")
    refuse_clobber(
        [("input table", table), ("--weights", opts.get("ini")), ("--lm", opts.get("lm_path"))],
        [("-o", out)],
    )
    weights = with_run_dir(weight_spec(**opts).require(), run_dir)
    stats = combine_table(
        table, out, weights, column_only=column_only, progress_every=0 if quiet else progress_every
    )
    if not quiet:
        say(f"combined {stats.lines:,} phrase pairs into {out}")


@click.command("filter")
@click.argument("table")
@click.option("-o", "--output", "out", required=True, help="Output (.gz: gzip; - stdout).")
@click.option(
    "--input", "input_path", metavar="FILE", help="Keep sources that are n-grams (n<=10) of FILE."
)
@click.option("--tokenize", "tokenize_lang", metavar="LANG", help="Tokenise --input (sacremoses).")
@click.option("--lowercase", is_flag=True, help="Lowercase --input (after --tokenize).")
@click.option(
    "--min-score",
    "min_scores",
    multiple=True,
    metavar="COL:TH",
    help="Drop pairs whose column COL (from 0) is below TH (repeatable).",
)
@click.option(
    "--top-k",
    type=Int(1, MAX_TOP_K),
    help="Per source, keep the K best by the combined score.",
)
@weight_options
@click.option(
    "--moses-ini",
    "ini_in",
    metavar="INI",
    help="The ini to rewrite for --ini-out (default --weights).",
)
@click.option(
    "--ini-out",
    metavar="NEW_INI",
    help="Write an ini whose phrase table is OUT, every path absolute (see --run-dir).",
)
@run_dir_option
@progress_option
@quiet_option
@user_errors
def filter_(table: str, out: str, min_scores: tuple[str, ...], **opts: Any) -> None:
    """Filter TABLE as Moses does, in one order-preserving pass.

    \b
    Example:
      rescorer filter model/phrase-table.gz --input test.en -o filtered.gz
      rescorer filter pt.gz --top-k 20 --weights moses.ini --min-score 2:0.0001 -o pruned.gz
    """
    from rescorer.moses.filter import FilterConfig, filter_table, parse_min_score

    quiet, progress_every = opts.pop("quiet"), opts.pop("progress_every")
    config = FilterConfig(
        input_path=opts.pop("input_path"),
        tokenize_lang=opts.pop("tokenize_lang"),
        lowercase=opts.pop("lowercase"),
        min_scores=tuple(spec for text in min_scores for spec in parse_min_score(text)),
        top_k=opts.pop("top_k"),
        progress_every=0 if quiet else progress_every,
    )
    ini_in, ini_out, run_dir = opts.pop("ini_in"), opts.pop("ini_out"), opts.pop("run_dir")
    from rescorer.job.clobber import refuse_clobber

    refuse_clobber(
        [("input table", table), ("--input", config.input_path), ("--moses-ini", ini_in),
         ("--weights", opts.get("ini")), ("--lm", opts.get("lm_path"))],
        [("-o", out), ("--ini-out", ini_out)],
    )  # fmt: skip
    weights = with_run_dir(weight_spec(**opts), run_dir)
    if config.top_k is not None:
        weights.require()
    stats = filter_table(
        table, out, config, weights=weights, ini_in=ini_in, ini_out=ini_out, run_dir=run_dir
    )
    if not quiet:
        say(stats.summary())


@click.command()
@click.argument("nbest")
@click.option("-o", "--output", "out", required=True, help="Output (.gz: gzip; - stdout).")
@click.option("--weights", "ini", metavar="INI", help="moses.ini whose [weight] to use.")
@click.option("--weight", "overrides", multiple=True, metavar="NAME=V1,..", help="Set weights.")
@click.option("--decoded-with", metavar="INI", help="The ini that made NBEST: keeps hidden parts.")
@click.option(
    "--feature-file", multiple=True, metavar="FILE", help="Extra 'Name= v ..' per n-best line."
)
@click.option("--nbest-out", is_flag=True, help="Write the re-sorted n-best list, new totals.")
@user_errors
def rerank(nbest: str, out: str, ini: str | None, overrides: tuple[str, ...], **opts: Any) -> None:
    """Rerank a Moses n-best list: print each sentence's best hypothesis under new weights.

    \b
    Example:
      rescorer rerank dev.nbest.gz --weights moses.ini --decoded-with moses.ini -o dev.1best
      rescorer rerank nbest.gz --weights moses.ini --feature-file rnn.feats --weight RNN0=0.2 \\
          -o -
    """
    from rescorer.job.clobber import refuse_clobber
    from rescorer.moses.nbest import RerankConfig, rerank_nbest

    refuse_clobber(
        [("n-best list", nbest), ("--weights", ini), ("--decoded-with", opts["decoded_with"])]
        + [("--feature-file", f) for f in opts["feature_file"]],
        [("-o", out)],
    )
    weights = weight_spec(ini, overrides).require().weights()
    decoded_with = weight_spec(opts["decoded_with"], ()).weights() if opts["decoded_with"] else None
    config = RerankConfig(weights, decoded_with, opts["feature_file"], opts["nbest_out"])
    stats = rerank_nbest(nbest, out, config)
    say(
        f"{stats.sentences:,} sentences, {stats.hypotheses:,} hypotheses; "
        f"1-best changed for {stats.changed:,}"
    )


@click.command("score-nbest")
@click.argument("nbest")
@click.option(
    "-m",
    "--model",
    "model_dirs",
    required=True,
    multiple=True,
    help="Model folder from rescorer train; repeat for one feature per model, in order.",
)
@click.option(
    "--input",
    "input_path",
    required=True,
    metavar="FILE",
    help="The source sentences that were decoded, one per line (as Moses read them).",
)
@click.option(
    "--phrase-table",
    "phrase_table",
    required=True,
    metavar="TABLE",
    help="The table the list was decoded with (or its unfiltered original): a word it has no "
    "entry for was passed through by Moses and adds 0, as in Moses.",
)
@click.option("-o", "--output", "out", required=True, help="Output file (.gz: gzip; - stdout).")
@click.option(
    "--name",
    "names",
    multiple=True,
    help="The new features' labels, one per -m in order (default RNN0, RNN1, ...): letters "
    "and digits, a letter first (mert takes a label with '_' for a sparse feature).",
)
@click.option(
    "--features-only",
    is_flag=True,
    help="Write 'NAME= v' lines (for rerank --feature-file), not the n-best list.",
)
@device_option
@score_precision_option
@threads_option
@progress_option
@quiet_option
@user_errors
def score_nbest(
    nbest: str,
    model_dirs: tuple[str, ...],
    input_path: str,
    phrase_table: str,
    out: str,
    names: tuple[str, ...],
    features_only: bool,
    device: str,
    precision: str,
    threads: int | None,
    progress_every: float,
    quiet: bool,
) -> None:
    """Add the RNN feature to each hypothesis of a Moses n-best list NBEST.

    The feature is the sum over the hypothesis' phrase pairs of ln p(target|source), each
    floored at -100 as Moses floors a table column: the feature decoding with a scored table
    would have given; a word passed through untranslated (no entry in --phrase-table) adds 0,
    as it does in Moses. The phrases come from the segmentation Moses writes with
    -include-segmentation-in-n-best or -report-segmentation; the source phrases from --input.
    Each line is written back with NAME= appended to its features (total unchanged), for
    Moses' extractor/mert, or rerank --weight NAME=...

    Several -m give one feature each, in order (RNN0, RNN1, ... unless --name): an inverse
    model's is the sum of ln p(source|target).

    \b
    Example:
      moses -f moses.ini -n-best-list dev.nbest 100 -include-segmentation-in-n-best < dev.en
      rescorer score-nbest dev.nbest -m rnn-model/ --input dev.en \\
          --phrase-table model/phrase-table.gz -o dev.rnn.nbest
      rescorer score-nbest dev.nbest -m rnn-fwd/ -m rnn-inv/ --input dev.en \\
          --phrase-table model/phrase-table.gz -o dev.rnn.nbest
    """
    names = feature_labels(names, model_dirs)
    from rescorer.device import resolve_device, resolve_precision
    from rescorer.job.clobber import model_files, refuse_clobber
    from rescorer.moses.nbest_pairs import add_pair_feature

    read = [("n-best list", nbest), ("--input", input_path), ("--phrase-table", phrase_table)]
    refuse_clobber(read + model_files(model_dirs), [("-o", out)])
    from rescorer.io.progress import Progress

    chosen = use_threads(threads)
    dev = resolve_device(device)
    prec = resolve_precision(precision, dev, "score")

    features = [
        (name, pair_scorer(m, dev, prec)) for name, m in zip(names, model_dirs, strict=True)
    ]
    if not quiet:
        say(f"{dev}, {prec}, {chosen}")
    progress = Progress(
        f"rescorer score-nbest {nbest}", "hypotheses", every=progress_every, enabled=not quiet
    )
    stats = add_pair_feature(
        nbest,
        input_path,
        out,
        features,
        phrase_table=phrase_table,
        features_only=features_only,
        origins=model_dirs,
        progress=progress,
    )
    if not quiet:
        by_model = stats.phrase_pairs - stats.passed_through
        say(
            f"{stats.hypotheses:,} hypotheses of {stats.sentences:,} sentences written to {out}; "
            f"of their {stats.phrase_pairs:,} phrase pairs, {by_model:,} were scored by the "
            f"model ({stats.scored_pairs:,} distinct) and {stats.passed_through:,} were words "
            "Moses passed through untranslated (no table entry), which add 0 as in Moses"
        )


def feature_labels(names: tuple[str, ...], model_dirs: tuple[str, ...]) -> tuple[str, ...]:
    """score-nbest's --name labels, one per -m (default RNN0, RNN1, ...), or a usage error: a
    count that differs, a label mert would take for a sparse feature, two the same."""
    names = names or tuple(f"RNN{i}" for i in range(len(model_dirs)))
    if len(names) != len(model_dirs):
        raise click.BadParameter(
            f"{len(names)} --name for {len(model_dirs)} -m: give one per model, in order",
            param_hint="--name",
        )
    from rescorer.moses.ini_rewrite import DENSE_NAME

    for name in names:
        if not DENSE_NAME.match(name):  # as moses-ini refuses a feature name
            raise click.BadParameter(
                f"{name!r}: expected a dense feature's label, [A-Za-z][0-9A-Za-z]* (mert and "
                "extractor take a label with '_' for a sparse feature)",
                param_hint="--name",
            )
    if len(set(names)) != len(names):
        raise click.BadParameter(f"{' '.join(names)}: labels must differ", param_hint="--name")
    return names


def pair_scorer(model_dir: str, dev: Any, prec: str) -> Any:
    """The model of ``model_dir`` loaded on ``dev``, as a function from (source, target)
    pairs to their log p in its direction (an inverse model reads the target phrase)."""
    from rescorer.constants import INVERSE
    from rescorer.model.checkpoint import load_model_dir
    from rescorer.score.scorer import score_pairs

    loaded = load_model_dir(model_dir, dev)
    inverse = loaded.direction == INVERSE

    def score(pairs: list[tuple[str, str]]) -> Any:
        if inverse:  # p(source | target): the model reads the target phrase
            pairs = [(target, source) for source, target in pairs]
        return score_pairs(loaded.model, loaded.src_vocab, loaded.tgt_vocab, pairs, precision=prec)

    return score
