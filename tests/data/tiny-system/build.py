"""Rebuild this tiny Moses system from ../shared/data/en-fr (run from the repository root).

    python tests/data/tiny-system/build.py ../shared/data/en-fr

dev/test: the first 10 lines of the real dev and test sets. phrase-table.gz: the real table's
pairs whose source is an n-gram of those 20 sentences (``rescorer filter --input``), cut to the
10 best targets per source by the real tuned weights (``rescorer filter --top-k 10``).
reordering-table.gz: the real reordering table's lines for exactly those pairs. lm.arpa: a
bigram model (maximum likelihood on the real train.fr, restricted to the words of the table's
targets and the references, the rest of the mass on <unk>; bigrams only after <s>), small
enough to commit, read by Moses' KENLM feature as ARPA text. moses.ini: the real tuned ini
with these files and a smaller search (stack and pop limit 100) so that tests decode in seconds.
"""

from __future__ import annotations

import collections
import gzip
import math
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(shared: Path) -> None:
    for part in ("dev", "test"):
        for lang in ("en", "fr"):
            lines = (shared / f"{part}.{lang}").read_text(encoding="utf-8").splitlines()[:10]
            (HERE / f"{part}.{lang}").write_text("".join(f"{x}\n" for x in lines), "utf-8")
    devtest = HERE / "devtest.tmp"
    devtest.write_bytes((HERE / "dev.en").read_bytes() + (HERE / "test.en").read_bytes())
    rescorer = [sys.executable, "-m", "rescorer"]
    tmp = HERE / "pt.tmp.gz"
    table, ini = str(shared / "phrase-table.gz"), str(shared / "moses.ini")
    subprocess.run(
        [*rescorer, "filter", table, "--input", str(devtest), "-o", str(tmp)], check=True
    )
    top = [*rescorer, "filter", str(tmp), "--top-k", "10", "--weights", ini]
    subprocess.run([*top, "-o", str(HERE / "phrase-table.gz")], check=True)
    tmp.unlink()
    devtest.unlink()
    pairs, words = set(), set()
    with gzip.open(HERE / "phrase-table.gz", "rt", encoding="utf-8") as f:
        for line in f:
            src, tgt = line.split(" ||| ")[:2]
            pairs.add((src, tgt))
            words.update(tgt.split())
    with gzip.open(shared / "reordering-table.wbe-msd-bidirectional-fe.gz", "rt", "utf-8") as f:
        kept = [line for line in f if tuple(line.split(" ||| ")[:2]) in pairs]
    with gzip.GzipFile(HERE / "reordering-table.gz", "wb", mtime=0) as g:
        g.write("".join(kept).encode("utf-8"))
    for part in ("dev", "test"):
        words.update((HERE / f"{part}.fr").read_text(encoding="utf-8").split())
    counts: collections.Counter[str] = collections.Counter()
    initial: collections.Counter[str] = collections.Counter()
    sentences = 0
    with open(shared / "train.fr", encoding="utf-8") as f:
        for line in f:
            tokens = line.split()
            counts.update(tokens)
            initial.update(tokens[:1])
            sentences += 1
    total = sum(counts.values()) + sentences  # every sentence ends in </s>
    kept_words = sorted(w for w in words if counts[w] > 0)
    unk = total - sentences - sum(counts[w] for w in kept_words)
    entries = [("<unk>", unk), ("</s>", sentences)] + [(w, counts[w]) for w in kept_words]
    # KenLM needs order >= 2: p(w | <s>) by maximum likelihood for the kept sentence-initial
    # words, the rest of <s>'s mass spread by the unigram model (backoff weight normalises).
    starts = [w for w in kept_words if initial[w] > 0]
    seen_bigram = sum(initial[w] for w in starts) / sentences
    seen_unigram = sum(counts[w] for w in starts) / total
    backoff = math.log10((1 - seen_bigram) / (1 - seen_unigram))
    lines = ["\\data\\", f"ngram 1={len(entries) + 1}", f"ngram 2={len(starts)}", ""]
    lines += ["\\1-grams:", f"-99\t<s>\t{backoff:.6f}"]
    lines += [f"{math.log10(c / total):.6f}\t{w}\t0" for w, c in entries]
    lines += ["", "\\2-grams:"]
    lines += [f"{math.log10(initial[w] / sentences):.6f}\t<s> {w}" for w in starts]
    lines += ["", "\\end\\", ""]
    (HERE / "lm.arpa").write_text("\n".join(lines), encoding="utf-8")
    ini = (shared / "moses.ini").read_text(encoding="utf-8")
    ini = ini.replace("reordering-table.wbe-msd-bidirectional-fe.gz", "reordering-table.gz")
    ini = ini.replace("path=lm.fr.binary order=5", "path=lm.arpa order=2")
    ini = ini.replace("[cube-pruning-pop-limit]\n1000", "[cube-pruning-pop-limit]\n100")
    ini = ini.replace("[stack]\n1000", "[stack]\n100")
    (HERE / "moses.ini").write_text(ini, encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
