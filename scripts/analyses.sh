#!/usr/bin/env bash
# The paper's analyses (docs/analyses.md) for one model and one Moses table:
#   bash scripts/analyses.sh MODEL_DIR [TABLE] [OUT]
# writes OUT/table2.md (compare), OUT/table3.txt (sample), OUT/table3-beam.txt (beam search),
# OUT/samples.moses.txt, OUT/samples-vs-table.txt and the figures OUT/fig3-scatter.png, fig4-words.png,
# fig5-phrases.png, each with its .json (what it shows: points, words or phrases, labels).
# Every step is seeded: the same model gives the same files.
set -euo pipefail
MODEL=${1:?usage: analyses.sh MODEL_DIR [TABLE] [OUT]}
TABLE=${2:-../shared/data/en-fr/phrase-table.gz}
OUT=${3:-docs/analyses}
RESCORER=${RESCORER:-rescorer}
mkdir -p "$OUT"

# Table 2: 5 frequent and 5 rare long sources, and the length summary over 2,000 sources.
$RESCORER compare "$TABLE" -m "$MODEL" --frequent 5 --rare 5 --summary-phrases 2000 \
    --format markdown --seed 1 -o "$OUT/table2.md"

# Table 3: 50 samples per source (the same sources as Table 2), top 5; then beam search.
grep -o '^| [^|]* (\(frequent\|rare\))' "$OUT/table2.md" \
    | sed -e 's/^| //' -e 's/ (\(frequent\|rare\))$//' -e 's/\\|/|/g' > "$OUT/sources.txt"
$RESCORER sample "$MODEL" --input "$OUT/sources.txt" -n 50 --top 5 --seed 1 -o "$OUT/table3.txt"
$RESCORER sample "$MODEL" --input "$OUT/sources.txt" --beam 5 --top 5 -o "$OUT/table3-beam.txt"
$RESCORER sample "$MODEL" --input "$OUT/sources.txt" -n 50 --seed 1 --format moses \
    -o "$OUT/samples.moses.txt"

# Do the samples leave the table? Each distinct finished sample against the table's targets.
python3 - "$TABLE" "$OUT/samples.moses.txt" > "$OUT/samples-vs-table.txt" <<'PY'
import sys
from rescorer.io.table import read_table
samples = [line.split(" ||| ")[:2] for line in open(sys.argv[2], encoding="utf-8")]
wanted = {s for s, _ in samples}
known = {(e.src, e.tgt) for e in read_table(sys.argv[1]) if e.src in wanted}
inside = sum((s, t) in known for s, t in samples)
print(f"{len(samples)} distinct samples of {len(wanted)} sources: {inside} are pairs of the "
      f"table, {len(samples) - inside} are not ({(len(samples) - inside) / max(len(samples), 1):.0%})")
PY

# Figures 3-5.
$RESCORER plot scatter "$TABLE" -m "$MODEL" --pairs 5000 --seed 1 -o "$OUT/fig3-scatter.png"
$RESCORER plot words -m "$MODEL" --side both --points 2000 --labels 200 --seed 1 \
    -o "$OUT/fig4-words.png"
# ZOOM="phrase one|phrase two": zoomed panels around these (default: 3 seeded random ones).
ZOOM_ARGS=()
if [ -n "${ZOOM:-}" ]; then
    IFS='|' read -ra PHRASES <<< "$ZOOM"
    for phrase in "${PHRASES[@]}"; do ZOOM_ARGS+=(--zoom "$phrase"); done
fi
$RESCORER plot phrases "$TABLE" -m "$MODEL" --phrases 3000 --seed 1 "${ZOOM_ARGS[@]}" \
    -o "$OUT/fig5-phrases.png"
