#!/usr/bin/env python3
"""Time rescorer's Moses-side commands on the real en-fr system (``../shared/data/en-fr``).

Runs each command as a subprocess (so the peak memory is its own) and prints one line per run:
wall seconds, peak resident MB, the command, and the command's own stderr summary. Also checks that
``filter --input`` equals the n-gram rule of filter-model-given-input.pl, run here in Perl when
``perl`` is on PATH.

    python scripts/bench_filter.py [--data ../shared/data/en-fr] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

DEFAULT_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "en-fr")

# The n-gram collection and the table loop of filter-model-given-input.pl (factor 0 only).
PERL_FILTER = r"""
my %USED; open(IN, shift) or die;
while (my $l = <IN>) { chomp $l; my @W = split(/ +/, $l);
  for (my $i = 0; $i <= $#W; $i++) { for (my $j = 0; $j < 10 && $i + $j <= $#W; $j++) {
    $USED{join(" ", @W[$i .. $i + $j])}++; } } }
while (my $e = <STDIN>) { my ($f, $r) = split(/ \|\|\| /, $e, 2); $f =~ s/ $//;
  print $e if defined $USED{$f}; }
"""


def run(args: list[str]) -> None:
    """Run a command; print its wall time, its own peak memory and its stderr summary."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(args)}\n{stderr}")
    summary = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    print(f"{seconds:7.2f} s {usage.ru_maxrss / 1024:6.0f} MB  {args[3]:8} | {summary}")


def perl_filter(table: str, input_path: str, script: str) -> bytes:
    """filter-model-given-input.pl's rule on ``table`` (no shell: a two-process pipe)."""
    unzip = subprocess.Popen(["gzip", "-dc", table], stdout=subprocess.PIPE)
    perl = subprocess.run(["perl", script, input_path], stdin=unzip.stdout, capture_output=True)
    unzip.wait()
    return perl.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--keep", help="Write the outputs here instead of a temporary folder.")
    opts = parser.parse_args()
    d = os.path.abspath(opts.data)
    table, ini, nbest = f"{d}/phrase-table.gz", f"{d}/moses.ini", f"{d}/dev.nbest.gz"
    out = opts.keep or tempfile.mkdtemp(prefix="bench-filter.")
    os.makedirs(out, exist_ok=True)
    rescorer = [sys.executable, "-m", "rescorer"]
    run([*rescorer, "filter", table, "--input", f"{d}/test.en", "-o", f"{out}/input.gz"])
    run([*rescorer, "filter", table, "--top-k", "20", "--weights", ini, "-o", f"{out}/top20.gz"])
    run([*rescorer, "filter", table, "--min-score", "2:0.0001", "-o", f"{out}/min.gz"])
    run([*rescorer, "combine", table, "--weights", ini, "-o", f"{out}/combined.gz"])
    run([*rescorer, "rerank", nbest, "--weights", ini, "-o", f"{out}/dev.1best"])
    if shutil.which("perl"):
        script = f"{out}/filter.pl"
        with open(script, "w") as f:
            f.write(PERL_FILTER)
        perl = perl_filter(table, f"{d}/test.en", script)
        ours = subprocess.run(["gzip", "-dc", f"{out}/input.gz"], capture_output=True).stdout
        print(f"filter --input equals filter-model-given-input.pl's rule: {perl == ours}")
    if not opts.keep:
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
