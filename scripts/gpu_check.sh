#!/usr/bin/env bash
# The first GPU's figures in one command (issue 25, item 7): on whatever CUDA machine is here,
#
#   tests      the `gpu` tests (pytest -m gpu)
#   extend     scripts/bench_extend.py --device cuda: `rescorer extend`'s batched beam search
#              against `score` on the same sources, at N = 5 and 10, random weights at the
#              paper's size and hidden 256 (then each model of GPU_CHECK_EXTEND_MODELS)
#   score      scripts/bench_score.py --device cuda at the paper's size (hidden 1000, shortlists
#              of 15,000, random weights): model alone and end to end, against the GPU's bf16
#              matrix-product peak measured at 8192^3; once per precision in GPU_CHECK_PRECISIONS
#   workers    rescorer score end to end with --workers 0, 2, 4, 8, 15 (one process each) on a
#              table of 10,000,000 lines made here from the one carried (repeated), TF32: the
#              rates, cmp of every output against the 0-worker one, then a --profile run at the
#              best count (the whole wall time, stretch by stretch)
#   pipeline   bench_score.py --compare-pipeline: end to end with the defaults against no overlap
#              and against a progress record per chunk, paired in turn
#   precision  how this GPU's TF32 products round; with GPU_CHECK_MODEL (a trained model folder)
#              scripts/bench_precision.py's error table (bf16 and TF32 against fp32)
#   train      rescorer train at the paper's size for GPU_CHECK_TRAIN_SECONDS per run, compiled
#              and eager: pairs/s (the median of the log's intervals after the first); then
#              train --profile: where an update's time goes
#   batch      rescorer train at the paper's size once per batch of GPU_CHECK_BATCHES, one run
#              at a time, GPU_CHECK_BATCH_SECONDS each, not compiled: updates/s, pairs/s and the
#              validation perplexity each batch reached in the same time (updates are
#              launch-bound on a GPU, so a larger batch learns more per second: by how much?)
#   capture    (issue 56) scripts/bench_train.py at the paper's size: ms per update and pairs/s
#              of train's eager update against train --capture's (CUDA graphs; and
#              torch.compile reduce-overhead) at each batch of GPU_CHECK_CAPTURE_BATCHES, with
#              the share of the bf16/TF32 peak measured in the same run; then the captured
#              update's gpu test (tests/train/test_capture_gpu.py)
#   ttq        (issue 56) validation perplexity against wall time, rescorer train at the
#              paper's size once per batch of GPU_CHECK_TTQ_BATCHES, one run at a time,
#              GPU_CHECK_TTQ_SECONDS each (scripts/bench_time_to_quality.py): a CSV and a PNG
#              beside FILE (ttq.csv, ttq.png), and the batch that reached the lowest perplexity
#   paper      (issue 56) the paper-size model trained with GPU_CHECK_PAPER_BATCH (the ttq
#              winner) until validation stops improving (--patience) or GPU_CHECK_PAPER_SECONDS
#              run out; the model folder comes back as GPU_CHECK_PAPER_OUT (default
#              paper-model beside FILE) with fp16 weights (34 MB at 17 M parameters, under the
#              64 MiB a call brings back), checked to load as fp32 on the CPU
#   graphs     (issue 57, item 3) scripts/bench_graphs.py at the paper's size: the model alone
#              (pre-parsed chunks through Scorer) with score --capture off (each level at its own
#              row count, eagerly) and on (bucketed row counts replayed as CUDA graphs), in turn,
#              per precision of GPU_CHECK_PRECISIONS: pairs/s, GFLOP/s and the share of the peak
#              of the precision used, measured in the same run, the graphs captured and the
#              largest score difference; then the captured steps' gpu test
#
# and writes one Markdown block for BENCHMARKS.md to FILE (the argument), else to
# $OUT/gpu-check.md when OUT is set, else to ./gpu-check.md, and to stdout; every command's own
# output goes to FILE's name with .log for .md. On a machine without CUDA every section says it
# is skipped and why; GPU_CHECK_DEVICE=cpu runs them all on the CPU instead (with small sizes:
# a dry run of this script, which tests/scripts/test_gpu_check.py makes).
#
#   scripts/gpu_check.sh [FILE]
#
# Only the repository is needed: the table is ../shared/data/en-fr/phrase-table.gz where it
# exists, else the bundled sample (rescorer/sample/en-fr.sample.gz, repeated to the line counts).
# rescorer runs from this checkout (PYTHONPATH). A machine without its dependencies gets them
# with pip install -c constraints.txt -e . (without the torch pin where a CUDA torch is
# installed); a machine without network needs the missing ones carried as wheels
# (GPU_CHECK_WHEELS=DIR: pip install --no-index --no-deps DIR/*.whl).
#
# Environment (defaults: the paper's sizes, sized for one call of about 10 minutes on an H100:
# the first run, 2026-11-26, took 552 s for tests, score, train (two 100 s runs), precision,
# pipeline and part of workers, with the en-fr table; split the sections over calls with
# GPU_CHECK_SECTIONS where a call is shorter):
#   GPU_CHECK_SECTIONS      "tests batch workers train extend score precision pipeline" (in
#                           this order, the most wanted first: a run cut short by its time
#                           keeps those. Every section has an H100 figure (BENCHMARKS.md);
#                           the open one is batch's: 80 s runs at the paper's size stopped
#                           near the unigram's perplexity, so give it a call of its own with
#                           GPU_CHECK_BATCHES="64 1024" GPU_CHECK_BATCH_SECONDS=270 (two runs
#                           and their start fit one 600 s call)). Issue 56's sections, capture,
#                           ttq and paper, and issue 57's graphs, run only when named here
#   GPU_CHECK_DEVICE        cuda if torch sees one; cpu forces a CPU dry run
#   GPU_CHECK_TABLE         the table (see above)
#   GPU_CHECK_SIZE          paper (1000 hidden, 100 rank, 500 maxout, 15,000 words) or tiny
#   GPU_CHECK_LINES         300000 lines end to end (score, pipeline; a GPU chunk is 16 MiB,
#                           about 140,000 lines), GPU_CHECK_BASELINE_LINES 5000
#   GPU_CHECK_REPEATS       2 (score's alternating model-alone / end-to-end pairs)
#   GPU_CHECK_PRECISIONS    "bf16 tf32" (score)
#   GPU_CHECK_COMPILE       "yes no" (train runs both; score and workers use the first)
#   GPU_CHECK_WORKERS       "0 2 4 8 15", on GPU_CHECK_WORKER_LINES 10000000 lines (0 always
#                           runs, first: the ratio's base), GPU_CHECK_WORKER_PRECISION tf32
#                           (fp32 on the CPU), after a warm-up of GPU_CHECK_WARM_LINES 300000.
#                           At the 57,000-71,000 pairs/s of 2026-11-26 a run is 2-3 minutes:
#                           give the section a call of its own (GPU_CHECK_SECTIONS=workers);
#                           then the main process's ceiling: bench_io.py --noop on the table
#                           carried with GPU_CHECK_NOOP_WORKERS 8 workers
#   GPU_CHECK_TRAIN_SECONDS 90 per training run (two runs: 3 minutes), GPU_CHECK_LOG_EVERY 100,
#                           GPU_CHECK_TRAIN_UPDATES (unset) a cap on the updates of each run,
#                           GPU_CHECK_PROFILE_UPDATES 200 updates of a third run, --profile'd
#                           (where an update's time goes; 0 skips it)
#   GPU_CHECK_EXTEND_LINES  20000 lines of the table searched (extend), GPU_CHECK_EXTEND_BEAMS
#                           "5 10", GPU_CHECK_EXTEND_HIDDEN "1000 256" (random weights; tiny: 16),
#                           GPU_CHECK_EXTEND_MODELS (unset) trained model folders, one row each
#   GPU_CHECK_MODEL         a trained model folder for the precision section's error table
#   GPU_CHECK_PAIRS         20000 pairs for that table
#   GPU_CHECK_BATCHES       "64 256 1024" (batch), GPU_CHECK_BATCH_SECONDS 100 per run (the
#                           table's reading included: about 30 s of en-fr's), a validation
#                           every GPU_CHECK_BATCH_VALID_EVERY 250 updates; GPU_CHECK_TRAIN_UPDATES
#                           caps these runs too
#   GPU_CHECK_TESTS         pytest's arguments ("-m gpu tests")
#   GPU_CHECK_GEMM          the peak's matrix size: 8192 on a GPU (512 on the CPU)
#   GPU_CHECK_CAPTURE_BATCHES "64 256 1024" (capture), GPU_CHECK_CAPTURE_MODES "off on compile",
#                           GPU_CHECK_CAPTURE_PRECISIONS "bf16 tf32", GPU_CHECK_CAPTURE_UPDATES
#                           50 timed updates after GPU_CHECK_CAPTURE_WARMUP 10 (and until every
#                           length bucket is captured), on GPU_CHECK_CAPTURE_PAIRS 20000 pairs;
#                           GPU_CHECK_CAPTURE_TESTS the test run after it
#                           ("tests/train/test_capture_gpu.py"; empty: none)
#   GPU_CHECK_GRAPHS_LINES  300000 lines (graphs) in chunks of GPU_CHECK_GRAPHS_CHUNK_LINES
#                           (unset: 140,000 on a GPU, a 16 MiB chunk's), GPU_CHECK_GRAPHS_CAPTURE
#                           "off on", GPU_CHECK_GRAPHS_COMPILE no, GPU_CHECK_GRAPHS_REPEATS 3;
#                           GPU_CHECK_GRAPHS_TESTS the test run after it ("tests/score/test_gpu.py
#                           -k captured"; empty: none)
#   GPU_CHECK_TTQ_BATCHES   "64 256 1024 4096" (ttq), GPU_CHECK_TTQ_SECONDS 90 per run (reading
#                           the table included), a validation every GPU_CHECK_TTQ_VALID_PAIRS
#                           64000 training pairs, GPU_CHECK_TTQ_FLAGS more train flags
#                           ("--capture auto")
#   GPU_CHECK_PAPER_BATCH   the batch of the paper run (auto: train's --batch-size auto),
#                           GPU_CHECK_PAPER_SECONDS 480 (train's --max-time: the whole command),
#                           GPU_CHECK_PAPER_PATIENCE 10, GPU_CHECK_PAPER_VALID_EVERY 500,
#                           GPU_CHECK_PAPER_FLAGS more train flags (--direction inverse for
#                           the inverse model), GPU_CHECK_PAPER_OUT the folder to bring back
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-python3}"
md="${1:-${OUT:+$OUT/gpu-check.md}}"
md="${md:-gpu-check.md}"
log="${md%.md}.log"
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
: >"$md"
: >"$log"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

say() { printf '%s\n' "$*" | tee -a "$md"; }
started=$(date +%s.%N)
note() {  # a line in the log and on stderr, with the seconds since the start: what each step cost
    local at
    at=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    printf '== [%s s] %s\n' "$at" "$*" | tee -a "$log" >&2
}
run_logged() { note "$*"; "$@" >>"$log" 2>&1; }
run_pytest() {  # NAME ARGS...: pytest ARGS in one process (-o addopts=: no xdist workers, which
    # the GPU machine may lack); its summary line said, its failures listed, its output logged
    local name=$1 rc last
    shift
    note "pytest $*"
    (cd "$root" && "$py" -m pytest -q -p no:cacheprovider -o addopts= "$@") >"$work/$name.txt" 2>&1
    rc=$?
    cat "$work/$name.txt" >>"$log"
    last=$(grep -E '(passed|failed|skipped|error|deselected)' "$work/$name.txt" | tail -n 1)
    say "\`pytest $*\` (exit $rc): ${last:-no summary, see the log}"
    if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then
        grep -E '^(FAILED|ERROR)' "$work/$name.txt" | head -n 20 | sed 's/^/    /' | tee -a "$md"
    fi
}

# ------------------------------------------------------------------ the package and its needs
facts() {  # one interpreter: the imports rescorer needs, then whether CUDA is there and what it is
    "$py" - 2>>"$log" <<'PY'
import os
import click, isal, numpy, safetensors, torch, tqdm  # noqa: F401
import rescorer.score.pipeline  # noqa: F401
print(int(torch.cuda.is_available()))
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"{p.name} ({p.total_memory / 2**30:.0f} GiB, capability {p.major}.{p.minor}), "
          f"torch {torch.__version__}, CUDA {torch.version.cuda}, {os.cpu_count()} CPU cores")
else:
    print()
print(f"no CUDA device (torch {torch.__version__}), {os.cpu_count()} CPU cores")
PY
}
if ! found=$(facts); then
    if [ -n "${GPU_CHECK_WHEELS:-}" ]; then  # no network: the missing packages, carried
        run_logged "$py" -m pip install -q --no-index --no-deps "$GPU_CHECK_WHEELS"/*.whl
    else
        constraints="$work/constraints.txt"
        if "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
            note "a CUDA torch is installed: installing without constraints.txt's torch pin"
            grep -v '^torch==' "$root/constraints.txt" >"$constraints"
        else
            cp "$root/constraints.txt" "$constraints"
        fi
        run_logged "$py" -m pip install -q --retries 1 -c "$constraints" -e "$root"
    fi
    if ! found=$(facts); then
        missing=$("$py" - <<'PY' 2>/dev/null
import importlib.util
names = ["torch", "numpy", "click", "isal", "safetensors", "tqdm"]
print(" ".join(n for n in names if importlib.util.find_spec(n) is None))
PY
)
        echo "gpu_check.sh: rescorer cannot be imported (missing: ${missing:-see $log}). Without" \
            "network, download their wheels where pip works (pip download --no-deps" \
            "--only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d DIR" \
            "NAME==VERSION, versions from constraints.txt) and set GPU_CHECK_WHEELS=DIR" >&2
        exit 1
    fi
fi

cuda=$(sed -n 1p <<<"$found")
device="${GPU_CHECK_DEVICE:-$([ "$cuda" = 1 ] && echo cuda || echo none)}"
sections="${GPU_CHECK_SECTIONS:-tests batch workers train extend score precision pipeline}"
table="${GPU_CHECK_TABLE:-}"
if [ -z "$table" ]; then
    table="$root/../shared/data/en-fr/phrase-table.gz"
    [ -f "$table" ] || table="$root/rescorer/sample/en-fr.sample.gz"
fi
table="$(cd "$(dirname "$table")" && pwd)/$(basename "$table")"
if [ -n "${GPU_CHECK_MODEL:-}" ]; then  # bench_precision.py runs from scripts/
    GPU_CHECK_MODEL="$(cd "$GPU_CHECK_MODEL" && pwd)" || exit 2
fi
size="${GPU_CHECK_SIZE:-paper}"
case "$size" in
    paper) sizes=(1000 100 500 15000) ;;
    tiny) sizes=(16 8 8 300) ;;
    *) echo "gpu_check.sh: GPU_CHECK_SIZE=$size: expected paper or tiny" >&2; exit 2 ;;
esac
size_flags=(--hidden-size "${sizes[0]}" --embed-size "${sizes[1]}" --maxout-units "${sizes[2]}"
    --src-vocab-size "${sizes[3]}" --tgt-vocab-size "${sizes[3]}")
read -r -a compiles <<<"${GPU_CHECK_COMPILE:-yes no}"
precisions="${GPU_CHECK_PRECISIONS:-bf16 tf32}"
gemm="${GPU_CHECK_GEMM:-$([ "$device" = cuda ] && echo 8192 || echo 512)}"
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
where=$(sed -n 3p <<<"$found")
[ "$device" = cuda ] && where=$(sed -n 2p <<<"$found")

say "### GPU check ($(date -u +%F), commit $commit): $where"
say ""
say "scripts/gpu_check.sh; table $(basename "$table") ($table), model size $size" \
    "(hidden/rank/maxout/shortlists ${sizes[*]})."
if [ "$device" = cpu ]; then
    say ""
    say "**A dry run on the CPU (GPU_CHECK_DEVICE=cpu): these are no GPU figures.**"
fi

skip_without_cuda() {  # prints the reason and returns 0 when the section cannot run here
    if [ "$device" = none ]; then
        say "skipped: no CUDA device here (torch.cuda.is_available() is False); GPU_CHECK_DEVICE=cpu runs it on the CPU"
        return 0
    fi
    return 1
}

make_model() {  # a model folder of GPU_CHECK_SIZE with random weights, shortlists of the table
    [ -d "$work/model" ] && return 0
    note "a $size model with random weights in $work/model"
    "$py" - "$table" "$work/model" "${sizes[@]}" >>"$log" 2>&1 <<'PY'
import sys, torch
from rescorer.io.table import read_table
from rescorer.model.checkpoint import save_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.vocab import build_vocabs
table, folder, hidden, rank, maxout, words = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
src_vocab, tgt_vocab = build_vocabs(((e.src, e.tgt) for e in read_table(table)), words, words)
config = ModelConfig(words, words, hidden_size=hidden, embed_size=rank, maxout_units=maxout)
torch.manual_seed(0)
model = EncoderDecoder(config)
init_weights_(model)
save_model_dir(folder, model, src_vocab, tgt_vocab, {"made_by": "scripts/gpu_check.sh"})
PY
}

section_tests() {
    say ""
    say "#### The gpu tests"
    say ""
    read -r -a targets <<<"${GPU_CHECK_TESTS:--m gpu tests}"
    run_pytest pytest "${targets[@]}"
    if [ "$device" != cuda ]; then
        say "(no CUDA device: the gpu tests skip themselves)"
    fi
}

section_score() {
    say ""
    say "#### Scoring, $size size (scripts/bench_score.py)"
    say ""
    skip_without_cuda && return
    make_model || { say "FAILED to make the model (see $log)"; return; }
    local precision
    for precision in $precisions; do
        note "bench_score.py --precision $precision"
        if "$py" "$root/scripts/bench_score.py" --device "$device" --table "$table" \
            --model "$work/model" --precision "$precision" --compile "${compiles[0]}" \
            --lines "${GPU_CHECK_LINES:-300000}" --baseline-lines "${GPU_CHECK_BASELINE_LINES:-5000}" \
            --repeats "${GPU_CHECK_REPEATS:-2}" --gemm-size "$gemm" \
            >"$work/score.md" 2>>"$log"; then
            sed 's/^### /##### /' "$work/score.md" | tee -a "$md"
            say ""
        else
            say "bench_score.py --precision $precision FAILED (see $log)"
        fi
    done
}

section_workers() {
    say ""
    say "#### --workers: rescorer score end to end, one process per count"
    say ""
    skip_without_cuda && return
    make_model || { say "FAILED to make the model (see $log)"; return; }
    local lines="${GPU_CHECK_WORKER_LINES:-10000000}"
    local warm_lines="${GPU_CHECK_WARM_LINES:-$((lines < 300000 ? lines : 300000))}"
    local precision="${GPU_CHECK_WORKER_PRECISION:-$([ "$device" = cuda ] && echo tf32 || echo fp32)}"
    # The table is made here from the one carried (repeated to the line count).
    "$py" - "$root/scripts" "$table" "$lines" "$work/workers.gz" "$warm_lines" "$work/warm-in.gz" \
        >>"$log" 2>&1 <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from benchlib import write_slice
print(write_slice(sys.argv[2], int(sys.argv[3]), sys.argv[4], cycle=True), "lines")
print(write_slice(sys.argv[2], int(sys.argv[5]), sys.argv[6], cycle=True), "lines (warm-up)")
PY
    local flags=(-m "$work/model" --device "$device" --compile "${compiles[0]}"
        --precision "$precision")
    # A first run fills inductor's on-disk cache, so no count pays the first compilation.
    run_logged "$py" -m rescorer score "$work/warm-in.gz" "${flags[@]}" -o "$work/warm.gz" -q
    say "$lines lines (the table repeated), gzip to gzip, --compile ${compiles[0]}," \
        "--precision $precision; seconds and pairs/s as score reports them (the model loaded;" \
        "compiling from inductor's warm cache included), wall: the whole process."
    say ""
    say "| workers | seconds | pairs/s | vs 0 workers | wall s |"
    say "|---:|---:|---:|---:|---:|"
    # The ratio is against the 0-worker run whatever GPU_CHECK_WORKERS's order: 0 runs first
    # (added when the list lacks it), and the others in the list's order after it.
    local counts=(0) n base="" best=0 best_rate=0 same=True
    for n in ${GPU_CHECK_WORKERS:-0 2 4 8 15}; do
        [ "$n" = 0 ] || counts+=("$n")
    done
    for n in "${counts[@]}"; do
        note "rescorer score --workers $n"
        local t0 t1 line
        t0=$(date +%s.%N)
        (cd "$root" && "$py" -m rescorer score "$work/workers.gz" "${flags[@]}" --workers "$n" \
            -o "$work/w$n.gz") >"$work/w$n.txt" 2>&1
        local rc=$?
        t1=$(date +%s.%N)
        cat "$work/w$n.txt" >>"$log"
        line=$(grep -E 'scored [0-9,]+ pairs in [0-9.]+ s ' "$work/w$n.txt" | tail -n 1)
        if [ $rc -ne 0 ] || [ -z "$line" ]; then
            say "| $n | FAILED (exit $rc, see the log) | | | |"
            continue
        fi
        local secs rate
        secs=$(sed -E 's/.* in ([0-9.]+) s .*/\1/' <<<"$line")
        rate=$(sed -E 's/.*\(([0-9,]+) pairs\/s.*/\1/' <<<"$line" | tr -d ,)
        [ "$n" = 0 ] && base=$rate
        if [ "$rate" -gt "$best_rate" ]; then best=$n; best_rate=$rate; fi
        local ratio="(the 0-worker run failed)"
        [ -n "$base" ] && ratio=$(awk -v a="$rate" -v b="$base" 'BEGIN {printf "%.2f", a / b}')
        say "| $n | $secs | $(printf "%'d" "$rate") | $ratio | $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') |"
        if [ -f "$work/w0.gz" ] && ! cmp -s "$work/w$n.gz" "$work/w0.gz"; then
            say "| $n | the output differs from the 0-worker run's (cmp)! | | | |"
            same=False
        fi
        [ "$n" = 0 ] || rm -f "$work/w$n.gz"  # 10 million lines: keep one output on disk
    done
    say ""
    say "outputs of every worker count byte-identical to the 0-worker run's (cmp): $same"
    say ""
    # Chunks reach the workers through /dev/shm; a refusal leaves them to the pipes (slower).
    say "/dev/shm (size, free): $(df -h --output=size,avail /dev/shm 2>/dev/null | tail -n 1 | xargs)"
    grep -h "no shared memory" "$work"/w*.txt 2>/dev/null | head -n 1 | while read -r line; do
        say "$line"
    done
    note "bench_io.py --noop"
    say ""
    say "The main process's own ceiling (scripts/bench_io.py --noop: read, cut, keep order and" \
        "write the table carried, no-op stages in ${GPU_CHECK_NOOP_WORKERS:-8} workers, best of 3):"
    say ""
    if (cd "$root/scripts" && "$py" bench_io.py --table "$table" --noop \
        --max-workers "${GPU_CHECK_NOOP_WORKERS:-8}" --repeat 3) >"$work/noop.txt" 2>>"$log"; then
        grep '^|' "$work/noop.txt" | tee -a "$md"
    else
        say "bench_io.py --noop FAILED (see $log)"
    fi
    say ""
    say "The whole wall time of a --profile run at the best count ($best workers; a profiled run" \
        "synchronises the GPU at every phase, so it is slower):"
    say ""
    note "rescorer score --workers $best --profile"
    if (cd "$root" && "$py" -m rescorer score "$work/workers.gz" "${flags[@]}" --workers "$best" \
        --profile -o "$work/profiled.gz") >"$work/profile.txt" 2>&1; then
        cat "$work/profile.txt" >>"$log"
        say '```'
        sed -n '/wall time .* stretch by stretch/,$p' "$work/profile.txt" \
            | sed 's/^rescorer score: //' | tee -a "$md"
        say '```'
    else
        cat "$work/profile.txt" >>"$log"
        say "rescorer score --profile FAILED (see $log)"
    fi
}

extend_run() {  # one bench_extend.py call: its arguments after the common ones
    local beams
    read -r -a beams <<<"${GPU_CHECK_EXTEND_BEAMS:-5 10}"
    note "bench_extend.py $*"
    if (cd "$root/scripts" && "$py" bench_extend.py --device "$device" --table "$table" \
        --lines "${GPU_CHECK_EXTEND_LINES:-20000}" --beam "${beams[@]}" \
        --embed-size "${sizes[1]}" --maxout-units "${sizes[2]}" --vocab-size "${sizes[3]}" "$@") \
        >"$work/extend.txt" 2>>"$log"; then
        cat "$work/extend.txt" >>"$log"
        sed -n '/^### /,$p' "$work/extend.txt" | sed 's/^### /##### /' | tee -a "$md"
    else
        cat "$work/extend.txt" >>"$log"
        say "bench_extend.py $* FAILED (see $log)"
    fi
}

section_extend() {
    say ""
    say "#### Generation: extend against score on the same sources (bench_extend.py)"
    say ""
    skip_without_cuda && return
    local hidden models model
    read -r -a hidden <<<"${GPU_CHECK_EXTEND_HIDDEN:-$([ "$size" = paper ] && echo "1000 256" || echo "${sizes[0]}")}"
    extend_run --hidden "${hidden[@]}"
    read -r -a models <<<"${GPU_CHECK_EXTEND_MODELS:-}"
    for model in "${models[@]}"; do
        if [ -d "$model" ]; then
            extend_run --model "$(cd "$model" && pwd)"
        else
            say "GPU_CHECK_EXTEND_MODELS: no model folder $model"
        fi
    done
}

section_pipeline() {
    say ""
    say "#### Overlap and progress records, end to end (bench_score.py --compare-pipeline)"
    say ""
    skip_without_cuda && return
    make_model || { say "FAILED to make the model (see $log)"; return; }
    note "bench_score.py --compare-pipeline"
    if "$py" "$root/scripts/bench_score.py" --compare-pipeline --device "$device" \
        --table "$table" --model "$work/model" --compile "${compiles[0]}" \
        --precision "${precisions%% *}" --lines "${GPU_CHECK_LINES:-300000}" \
        --repeats "${GPU_CHECK_REPEATS:-2}" >"$work/pipeline.md" 2>>"$log"; then
        sed 's/^### /##### /' "$work/pipeline.md" | tee -a "$md"
    else
        say "bench_score.py --compare-pipeline FAILED (see $log)"
    fi
}

section_precision() {
    say ""
    say "#### Precision: TF32 on this GPU"
    say ""
    if [ "$device" = cuda ]; then
        local how
        how=$("$py" - "$root/scripts" <<'PY' 2>>"$log"
import sys, torch
sys.path.insert(0, sys.argv[1])
from bench_precision import tf32_rounding
print(tf32_rounding(torch.device("cuda")))
PY
)
        say "TF32 products round fp32 operands as: ${how:-FAILED (see $log)} (1024 + k/4 times" \
            "an identity matrix; the CPU emulation assumes round to nearest)."
    else
        skip_without_cuda || say "(the TF32 rounding probe needs CUDA: not run on the CPU)"
    fi
    if [ -z "${GPU_CHECK_MODEL:-}" ]; then
        say ""
        say "No GPU_CHECK_MODEL: set it to a trained model folder (a copy of runs/curve/fwd, say)" \
            "for bench_precision.py's error table on real pairs."
        return
    fi
    [ "$device" = none ] && return
    note "bench_precision.py --model $GPU_CHECK_MODEL"
    if (cd "$root/scripts" && "$py" bench_precision.py --model "$GPU_CHECK_MODEL" \
        --table "$table" --device "$device" --pairs "${GPU_CHECK_PAIRS:-20000}" \
        --chunk-lines "${GPU_CHECK_PAIRS:-20000}" --gemm-size "$gemm") \
        >"$work/precision.md" 2>>"$log"; then
        say ""
        sed 's/^### /##### /' "$work/precision.md" | tee -a "$md"
    else
        say "bench_precision.py FAILED (see $log)"
    fi
}

section_train() {
    say ""
    say "#### Training, $size size (rescorer train, ${GPU_CHECK_TRAIN_SECONDS:-90} s per run)"
    say ""
    skip_without_cuda && return
    say "pairs/s: the median over the log's intervals of ${GPU_CHECK_LOG_EVERY:-100} updates" \
        "after the first (which holds compiling); --max-time counts reading the table too."
    say ""
    say "| compiled | updates | pairs/s | intervals | first interval's pairs/s |"
    say "|---|---:|---:|---:|---:|"
    local compile
    for compile in "${compiles[@]}"; do
        local out="$work/train-$compile"
        note "rescorer train --compile $compile"
        if ! (cd "$root" && "$py" -m rescorer train "$table" -o "$out" --device "$device" \
            --max-time "${GPU_CHECK_TRAIN_SECONDS:-90}s" --compile "$compile" "${size_flags[@]}" \
            --log-every "${GPU_CHECK_LOG_EVERY:-100}" --valid-every 1000000 \
            ${GPU_CHECK_TRAIN_UPDATES:+--max-updates "$GPU_CHECK_TRAIN_UPDATES"} -q) >>"$log" 2>&1; then
            say "| $compile | FAILED (see $log) | | | |"
            continue
        fi
        "$py" - "$out/train.log.jsonl" "$compile" <<'PY' | tee -a "$md"
import json, statistics, sys
path, compile_ = sys.argv[1], sys.argv[2]
rates, update = [], 0
with open(path) as f:
    for line in f:
        record = json.loads(line)
        if "pairs_per_s" in record:
            rates.append(record["pairs_per_s"])
            update = record["update"]
steady = rates[1:] or rates
median = f"{statistics.median(steady):,.0f}" if steady else "no interval logged"
first = f"{rates[0]:,.0f}" if rates else ""
print(f"| {compile_} | {update:,} | {median} | {len(steady)} | {first} |")
PY
    done
    # Where an update's time goes: --profile synchronises the device at every phase, so its
    # total is slower than the runs above; the shares say what to make faster.
    local updates="${GPU_CHECK_PROFILE_UPDATES:-200}"
    [ "$updates" -gt 0 ] || return
    note "rescorer train --profile --max-updates $updates"
    say ""
    say "Where the time of an update goes (\`train --profile\`, --compile ${compiles[0]}," \
        "$updates updates, the first left out; every phase synchronises the device):"
    say ""
    if (cd "$root" && "$py" -m rescorer train "$table" -o "$work/train-profile" \
        --device "$device" --max-updates "$updates" --compile "${compiles[0]}" "${size_flags[@]}" \
        --log-every "${GPU_CHECK_LOG_EVERY:-100}" --valid-every 1000000 --profile) \
        >"$work/profile.txt" 2>&1; then
        cat "$work/profile.txt" >>"$log"
        say '```'
        sed -n '/where the time of/,/^  wall/p' "$work/profile.txt" | tee -a "$md"
        say '```'
    else
        cat "$work/profile.txt" >>"$log"
        say "rescorer train --profile FAILED (see $log)"
    fi
}

section_batch() {
    local secs="${GPU_CHECK_BATCH_SECONDS:-100}" every="${GPU_CHECK_BATCH_VALID_EVERY:-250}"
    say ""
    say "#### Batch size against time to perplexity ($size size, rescorer train, $secs s per run)"
    say ""
    skip_without_cuda && return
    say "One run at a time, not compiled, the default precision, seed 1; --max-time counts" \
        "reading the table too. pairs/s: the median over the log's intervals of" \
        "${GPU_CHECK_LOG_EVERY:-100} updates after the first; updates/s = pairs/s / batch;" \
        "a validation every $every updates, each counted in --max-time with its save (so a" \
        "smaller batch, with more updates, pays for more of them: the validations column)."
    say ""
    say "| batch | updates | updates/s | pairs/s | epochs | validations | best validation perplexity | unigram's |"
    say "|---:|---:|---:|---:|---:|---:|---:|---:|"
    local batch
    for batch in ${GPU_CHECK_BATCHES:-64 256 1024}; do
        local out="$work/batch-$batch"
        note "rescorer train --batch-size $batch"
        if ! (cd "$root" && "$py" -m rescorer train "$table" -o "$out" --device "$device" \
            --batch-size "$batch" --max-time "${secs}s" --compile no "${size_flags[@]}" \
            --log-every "${GPU_CHECK_LOG_EVERY:-100}" --valid-every "$every" --patience 0 \
            ${GPU_CHECK_TRAIN_UPDATES:+--max-updates "$GPU_CHECK_TRAIN_UPDATES"} -q) >>"$log" 2>&1; then
            say "| $batch | FAILED (see $log) | | | | | | |"
            continue
        fi
        local row
        if ! row=$("$py" - "$out/train.log.jsonl" "$batch" 2>>"$log" <<'PY'

import json, statistics, sys
path, batch = sys.argv[1], int(sys.argv[2])
rates, valid, update, epoch, unigram = [], [], 0, 0.0, None
with open(path) as f:
    for line in f:
        record = json.loads(line)
        update = max(update, record.get("update", 0))
        epoch = max(epoch, record.get("epoch", 0.0))
        if "pairs_per_s" in record:
            rates.append(record["pairs_per_s"])
        if "valid_ppl" in record:
            valid.append(record["valid_ppl"])
            unigram = record.get("unigram_ppl", unigram)
steady = rates[1:] or rates
rate = statistics.median(steady) if steady else None
cells = [f"{batch}", f"{update:,}", f"{rate / batch:.1f}" if rate else "no interval logged",
         f"{rate:,.0f}" if rate else "", f"{epoch:.4f}", f"{len(valid)}",
         f"{min(valid):.2f}" if valid else "no validation", f"{unigram:.1f}" if unigram else ""]
print("| " + " | ".join(cells) + " |")
PY
        ); then
            row="| $batch | its log could not be read (see $log) | | | | | | |"
        fi
        say "$row"
    done
}

section_capture() {
    say ""
    say "#### The captured update against the eager one, $size size (bench_train.py --capture)"
    say ""
    skip_without_cuda && return
    local batches modes precisions_c
    read -r -a batches <<<"${GPU_CHECK_CAPTURE_BATCHES:-64 256 1024}"
    read -r -a modes <<<"${GPU_CHECK_CAPTURE_MODES:-off on compile}"
    read -r -a precisions_c <<<"${GPU_CHECK_CAPTURE_PRECISIONS:-bf16 tf32}"
    note "bench_train.py --capture ${modes[*]} --batch-size ${batches[*]}"
    if (cd "$root/scripts" && "$py" bench_train.py --device "$device" --table "$table" \
        --hidden-size "${sizes[0]}" --pairs "${GPU_CHECK_CAPTURE_PAIRS:-20000}" \
        --batch-size "${batches[@]}" --capture "${modes[@]}" --precision "${precisions_c[@]}" \
        --variant train --compile no --updates "${GPU_CHECK_CAPTURE_UPDATES:-50}" \
        --warmup "${GPU_CHECK_CAPTURE_WARMUP:-10}" --gemm-size "$gemm") \
        >"$work/capture.md" 2>>"$log"; then
        sed 's/^### /##### /' "$work/capture.md" | tee -a "$md"
    else
        say "bench_train.py --capture FAILED (see $log)"
    fi
    local tests="${GPU_CHECK_CAPTURE_TESTS-tests/train/test_capture_gpu.py}"
    [ -n "$tests" ] || return
    say ""
    # shellcheck disable=SC2086  # pytest's arguments, one word each
    run_pytest capture-tests $tests
}

section_graphs() {
    say ""
    say "#### The model alone, eager against captured, $size size (bench_graphs.py)"
    say ""
    skip_without_cuda && return
    make_model || { say "FAILED to make the model (see $log)"; return; }
    local captures chunk=() tests
    read -r -a captures <<<"${GPU_CHECK_GRAPHS_CAPTURE:-off on}"
    [ -n "${GPU_CHECK_GRAPHS_CHUNK_LINES:-}" ] && chunk=(--chunk-lines "$GPU_CHECK_GRAPHS_CHUNK_LINES")
    note "bench_graphs.py --precision $precisions --capture ${captures[*]}"
    # shellcheck disable=SC2086  # $precisions: one word per precision
    if (cd "$root/scripts" && "$py" bench_graphs.py --device "$device" --table "$table" \
        --model "$work/model" --precision $precisions --capture "${captures[@]}" \
        --compile "${GPU_CHECK_GRAPHS_COMPILE:-no}" --lines "${GPU_CHECK_GRAPHS_LINES:-300000}" \
        "${chunk[@]}" --repeats "${GPU_CHECK_GRAPHS_REPEATS:-3}" --gemm-size "$gemm") \
        >"$work/graphs.md" 2>>"$log"; then
        sed 's/^### /##### /' "$work/graphs.md" | tee -a "$md"
    else
        say "bench_graphs.py FAILED (see $log)"
    fi
    tests="${GPU_CHECK_GRAPHS_TESTS-tests/score/test_gpu.py -k captured}"
    [ -n "$tests" ] || return
    say ""
    # shellcheck disable=SC2086  # pytest's arguments, one word each
    run_pytest graphs-tests $tests
}

section_ttq() {
    local secs="${GPU_CHECK_TTQ_SECONDS:-90}" batches
    read -r -a batches <<<"${GPU_CHECK_TTQ_BATCHES:-64 256 1024 4096}"
    say ""
    say "#### Time to quality: validation perplexity against wall time ($size size, $secs s per run)"
    say ""
    skip_without_cuda && return
    local flags
    read -r -a flags <<<"${GPU_CHECK_TTQ_FLAGS:---capture auto}"
    local dir
    dir="$(dirname "$md")"
    note "bench_time_to_quality.py --batch-size ${batches[*]}"
    if (cd "$root/scripts" && "$py" bench_time_to_quality.py --table "$table" \
        --hidden-size "${sizes[0]}" --batch-size "${batches[@]}" \
        --minutes "$(awk -v s="$secs" 'BEGIN {print s / 60}')" \
        --valid-pairs "${GPU_CHECK_TTQ_VALID_PAIRS:-64000}" --work "$work/ttq" \
        --device "$device" --csv "$dir/ttq.csv" --png "$dir/ttq.png" -- \
        --embed-size "${sizes[1]}" --maxout-units "${sizes[2]}" --src-vocab-size "${sizes[3]}" \
        --tgt-vocab-size "${sizes[3]}" "${flags[@]}" \
        ${GPU_CHECK_TRAIN_UPDATES:+--max-updates "$GPU_CHECK_TRAIN_UPDATES"}) \
        >"$work/ttq.md" 2>>"$log"; then
        sed 's/^### /##### /; s|(\([^)]*\)/ttq.png)|(ttq.png)|' "$work/ttq.md" | tee -a "$md"
        local best
        best=$("$py" - "$dir/ttq.csv" <<'PY' 2>>"$log"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], encoding="utf-8")))
best = min(rows, key=lambda r: float(r["valid_ppl"]))
print(f"batch {best['batch']}: validation perplexity {float(best['valid_ppl']):.2f}"
      f" after {float(best['seconds']):.0f} s")
PY
)
        say ""
        say "Lowest validation perplexity: ${best:-none (see $log)}. CSV: ttq.csv, PNG: ttq.png" \
            "(beside this file)."
    else
        say "bench_time_to_quality.py FAILED (see $log)"
    fi
}

section_paper() {
    local secs="${GPU_CHECK_PAPER_SECONDS:-480}" batch="${GPU_CHECK_PAPER_BATCH:-auto}"
    local folder="${GPU_CHECK_PAPER_OUT:-$(dirname "$md")/paper-model}"
    say ""
    say "#### The paper's model trained to its early stop ($size size, batch $batch, at most $secs s)"
    say ""
    skip_without_cuda && return
    local flags out="$work/paper"
    read -r -a flags <<<"${GPU_CHECK_PAPER_FLAGS:-}"
    note "rescorer train --batch-size $batch --max-time ${secs}s"
    if ! (cd "$root" && "$py" -m rescorer train "$table" -o "$out" --device "$device" \
        --batch-size "$batch" --max-time "${secs}s" "${size_flags[@]}" \
        --patience "${GPU_CHECK_PAPER_PATIENCE:-10}" \
        --valid-every "${GPU_CHECK_PAPER_VALID_EVERY:-500}" --log-every "${GPU_CHECK_LOG_EVERY:-100}" \
        ${GPU_CHECK_TRAIN_UPDATES:+--max-updates "$GPU_CHECK_TRAIN_UPDATES"} \
        "${flags[@]}") >"$work/paper.txt" 2>&1; then
        cat "$work/paper.txt" >>"$log"
        say "rescorer train FAILED (see $log)"
        return
    fi
    cat "$work/paper.txt" >>"$log"
    say '```'
    grep -E 'rescorer train: (device|stopped|verdict)' "$work/paper.txt" | tee -a "$md"
    say '```'
    # The folder without the training state, its weights in fp16; it must load as fp32.
    rm -rf "$folder"
    if ! "$py" - "$out" "$folder" >>"$log" 2>&1 <<'PY'; then
import shutil, sys
import torch
from safetensors.torch import load_file, save_file
from rescorer.constants import TRAIN_STATE_FILE, WEIGHTS_FILE
from rescorer.model.checkpoint import load_model_dir
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst, ignore=shutil.ignore_patterns(TRAIN_STATE_FILE))
weights = load_file(f"{src}/{WEIGHTS_FILE}")
save_file({k: v.half().contiguous() for k, v in weights.items()}, f"{dst}/{WEIGHTS_FILE}",
          metadata={"format": "pt", "rounded": "fp16 by scripts/gpu_check.sh"})
model = load_model_dir(dst, device="cpu")[0]
assert all(p.dtype == torch.float32 for p in model.parameters()), "not fp32"
PY
        say "the fp16 copy FAILED (see $log)"
        return
    fi
    say ""
    say "The model folder: $(basename "$folder") ($(du -sh "$folder" | cut -f1), fp16 weights," \
        "no training state), loads as fp32 on the CPU."
}

for section in $sections; do
    case "$section" in
        tests | extend | score | workers | pipeline | precision | train | batch) "section_$section" ;;
        capture | ttq | paper | graphs) "section_$section" ;;
        *) echo "gpu_check.sh: unknown section $section (tests batch extend score workers" \
            "pipeline precision train capture ttq paper graphs)" >&2 ;;
    esac
done
say ""
say "(gpu_check.sh's log: $log)"
echo "gpu_check.sh: wrote $md" >&2
