"""``rescorer moses-ini``: a moses.ini for a scored or extended table, or with a second one."""

from __future__ import annotations

from typing import Any

import click

from rescorer.cli.common import say, user_errors
from rescorer.cli.moses import run_dir_option
from rescorer.cli.ranges import MAX_WEIGHT, Float


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
    type=Float(-MAX_WEIGHT, MAX_WEIGHT),
    multiple=True,
    help="Starting weight of the added columns: once per column in column order, or once "
    "for all [default: the median magnitude of the (first) table's own weights in INI, e.g. "
    "0.0432 for 0.115 0.0672 -0.000425 0.0192; 0.2 if they are all 0; negated for a fill-up's "
    "provenance column and a second table's constant 2.718 column: a cost per new pair].",
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
    beside "0 T 0": each span is translated from either table. A fill-up (its provenance
    column) is refused there: it replaces the first table (--phrase-table).

    The provenance (1 for the table's pairs, 2.718 for new ones, as combine-ptables.pl's
    fill-up writes it) is ln 0 or 1 in Moses, so its weight is added once per new pair used:
    it starts negative, a cost (the first table preferred), as does a second table's constant
    2.718 column. Moses splits a feature line at spaces, quoted or not: a path with a space
    is refused.

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
        if added.note:
            say(added.note)
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
