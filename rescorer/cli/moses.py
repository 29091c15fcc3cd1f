"""``rescorer moses-ini``, ``combine``, ``filter``, ``rerank`` and ``score-nbest``: Moses
integration."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import click

from rescorer.cli.common import (
    check_finite,
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


@click.command("moses-ini")
@click.argument("ini")
@click.option(
    "--phrase-table",
    "table",
    metavar="TABLE",
    help="The scored (or extended, --form fill-up) table; it replaces the ini's.",
)
@click.option(
    "--second-table",
    metavar="TABLE",
    help="Instead: add TABLE (rescorer extend --form second-table) as a second phrase table, "
    "with its own decoding path in [mapping] and its own weights.",
)
@click.option("-o", "--output", "out", required=True, help="The new moses.ini.")
@click.option(
    "--new-weight",
    "weights",
    type=float,
    multiple=True,
    callback=check_finite,
    help="Starting weight of the added columns: once per column in column order, or once "
    "for all [default: the median magnitude of the feature's own weights in INI, e.g. 0.0432 "
    "for 0.115 0.0672 -0.000425 0.0192; 0.2 if they are all 0].",
)
@click.option("--feature-name", help="The phrase-table feature, when several could fit.")
@run_dir_option
@user_errors
def moses_ini(
    ini: str, table: str | None, out: str, weights: tuple[float, ...], **opts: Any
) -> None:
    """Point INI's phrase table at a scored table: num-features, weights, path; or add a
    second phrase table (--second-table).

    Every path of the new ini is absolute, resolved as Moses resolves INI's relative paths
    when run from --run-dir (default INI's folder), and checked to exist: the new ini decodes
    from any folder. Every other byte of INI stays as it was. Re-tune afterwards with a fresh
    mert --working-dir (a stale features.list or filtered/ breaks re-tuning).

    The new columns are TABLE's scores beyond the feature's num-features: one per -m of the
    score run, then the word penalty. A shard's TABLE.manifest.json says how many; without
    one the count decides, the last column being the word penalty when it is e^k on every
    line. Refused (a table scored twice): a word-penalty column before the last, a model
    column above 1, two equal new columns, a count that differs from the manifest's. A
    fill-up's provenance column (rescorer extend: only 1 and 2.718) is the last one.

    --second-table TABLE adds a PhraseDictionaryMemory TranslationModel<n> with TABLE's
    column count, a weight per column (--new-weight) and a decoding path "1 T 1" in [mapping]
    beside "0 T 0": each span is translated from either table.

    \b
    Example:
      rescorer moses-ini model/moses.ini --phrase-table model/phrase-table.rnn.gz \\
          -o model/moses.rnn.ini
      rescorer moses-ini model/moses.ini --second-table new-pairs.gz -o model/moses.2t.ini
    """
    from rescorer.job.clobber import refuse_clobber
    from rescorer.moses.ini_rewrite import write_scored_ini

    second = opts.pop("second_table")
    if (table is None) == (second is None):
        raise click.UsageError("give --phrase-table or --second-table (one of them)")
    if second is not None:
        from rescorer.moses.ini_tables import write_second_table_ini

        if opts["feature_name"] is not None:
            raise click.UsageError("--feature-name goes with --phrase-table")
        refuse_clobber([("INI", ini), ("--second-table", second)], [("-o", out)])
        added = write_second_table_ini(ini, second, out, weights=weights, run_dir=opts["run_dir"])
        say(
            f"{added.name}: a second phrase table, num-features={added.num_features}, "
            f"[mapping] {' / '.join(added.mapping)}; wrote {out}"
        )
        return
    assert table is not None
    refuse_clobber([("INI", ini), ("--phrase-table", table)], [("-o", out)])
    update = write_scored_ini(
        ini,
        table,
        out,
        weights=weights,
        feature_name=opts["feature_name"],
        run_dir=opts["run_dir"],
    )
    f = update.feature
    what = f" ({update.added.describe()})" if update.added is not None else ""
    say(
        f"{f.name}: num-features {f.num_features} -> {update.num_features}{what}, "
        f"path={update.new_path}; wrote {out}"
    )
    if update.note:
        say(update.note)
    for warning in update.warnings:
        say(f"warning: {warning}")
    if update.binarize_command:
        say(f"{f.kind} is binarised: build it with {update.binarize_command}")


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
@click.option("--top-k", type=int, help="Per source, keep the K best by the combined score.")
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
    from rescorer.constants import INVERSE
    from rescorer.device import resolve_device, resolve_precision
    from rescorer.job.clobber import model_files, refuse_clobber
    from rescorer.model.checkpoint import load_model_dir
    from rescorer.moses.nbest_pairs import add_pair_feature

    read = [("n-best list", nbest), ("--input", input_path), ("--phrase-table", phrase_table)]
    refuse_clobber(read + model_files(model_dirs), [("-o", out)])
    from rescorer.io.progress import Progress
    from rescorer.score.scorer import score_pairs

    chosen = use_threads(threads)
    dev = resolve_device(device)
    prec = resolve_precision(precision, dev, "score")

    def scorer(model_dir: str) -> Any:
        loaded = load_model_dir(model_dir, dev)
        inverse = loaded.direction == INVERSE

        def score(pairs: list[tuple[str, str]]) -> Any:
            if inverse:  # p(source | target): the model reads the target phrase
                pairs = [(target, source) for source, target in pairs]
            return score_pairs(
                loaded.model, loaded.src_vocab, loaded.tgt_vocab, pairs, precision=prec
            )

        return score

    features = [(name, scorer(m)) for name, m in zip(names, model_dirs, strict=True)]
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
