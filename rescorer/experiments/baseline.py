"""A tuned phrase-based Moses baseline from a bitext, with the real Moses tools only.

The recipe of ``../shared/data/en-fr/README.md``, step by step, each resumable in its own
folder of the work directory (:mod:`steps`: a step with ``done.json`` is skipped, a killed one
runs again; tuning continues its own iterations with ``mert-moses.pl --continue``):

=========  =================================================================================
prepare    ``tokenizer.perl -l LANG`` (its default escaping) and ``lowercase.perl`` on every
           set; ``clean-corpus-n.perl train S T train.clean 1 80`` (ratio 9, Moses' default)
lm         KenLM ``lmplz -o 5 -S 20%`` on the cleaned target side (again with
           ``--discount_fallback`` when its discounts are out of range: a tiny corpus),
           ``build_binary trie``
train      ``train-model.perl`` with MGIZA++, ``grow-diag-final-and``,
           ``msd-bidirectional-fe``: its steps 1-9 (alignment, lexical tables, extraction,
           scoring, reordering table, moses.ini) one command each, a line each with its time;
           a killed training goes on from its first unfinished step (:mod:`train_model`)
tune       cube pruning (``[search-algorithm] 1``, pop limit and stack 1000) added to the ini,
           then ``mert-moses.pl`` (MERT, 100-best, 20 restarts, BLEU) on dev
system     the system folder Table 1 reads: ``moses.ini`` (tuned, relative paths), the tables
           and LM it names (hard links), ``dev.*``, ``test.*``, ``train.*`` (tokenised,
           lowercased)
evaluate   the test set decoded with the tuned ini, BLEU by ``multi-bleu.perl`` and sacreBLEU
=========  =================================================================================

Every command is appended to its step's ``log``; the driver prints one line a step.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from rescorer.experiments.baseline_config import (
    DEFAULT_MERT_SEED,
    SETS,
    BaselineConfig,
    check_counts,
    check_inputs,
)
from rescorer.experiments.bleu import sacrebleu_score
from rescorer.experiments.layout import read_lines
from rescorer.experiments.steps import DONE_FILE, Step, StepError, WorkDir, check_work_folder
from rescorer.experiments.tools import MosesTools, multi_bleu
from rescorer.experiments.train_model import Layout, run_steps
from rescorer.experiments.tuning_log import finished_iterations
from rescorer.io.outputs import write_text
from rescorer.moses.ini import read_ini


def run_baseline(cfg: BaselineConfig, *, echo: Callable[[str], None] | None = None) -> dict:
    """Run every step not done yet; returns the evaluate step's record."""
    check_work_folder(cfg.work)
    tools = MosesTools(cfg.moses)
    check_inputs(cfg, tools)
    work = WorkDir(cfg.work, echo=echo, prog="baseline")
    work.lock()  # one driver per work folder
    prepared = work.step("prepare", partial(prepare, cfg, tools))
    lm = work.step("lm", partial(train_lm, cfg, tools, prepared))
    # a killed training goes on from its last finished train-model.perl step (train_model.py)
    model = work.step(
        "train", partial(train_model, cfg, tools, prepared, lm, work.say), keep_partial=True
    )
    tuned = work.step("tune", partial(tune, cfg, tools, prepared, model), keep_partial=True)
    system = work.step("system", partial(assemble, cfg, prepared, model, tuned, lm))
    return work.step(LAST_STEP, partial(evaluate, cfg, tools, system))


LAST_STEP = "evaluate"  # its record: the baseline is built (WORK/system before it is not)


def baseline_built(work: Path) -> bool:
    """Whether :func:`run_baseline` has finished in ``work`` (nothing is read but the record)."""
    return (work / LAST_STEP / DONE_FILE).is_file()


def _script(tools: MosesTools, *parts: str) -> Path:
    return tools.root.joinpath("scripts", *parts)


def prepare(cfg: BaselineConfig, tools: MosesTools, step: Step) -> dict[str, Any]:
    """Tokenise and lowercase every set (unless it is already), clean train."""
    out = step.folder.resolve()
    for part in SETS:
        for lang in (cfg.src, cfg.tgt):
            raw = cfg.corpus / f"{part}.{lang}"
            done = out / f"{part}.{lang}"
            if cfg.tokenized:
                shutil.copyfile(raw, done)
                continue
            tok = out / f"{part}.tok.{lang}"
            step.run(
                [
                    "perl",
                    _script(tools, "tokenizer", "tokenizer.perl"),
                    "-l",
                    lang,
                    "-q",
                    "-threads",
                    str(cfg.threads),
                ],
                stdin=raw,
                stdout=tok,
            )
            step.run(
                ["perl", _script(tools, "tokenizer", "lowercase.perl")], stdin=tok, stdout=done
            )
            tok.unlink()
    step.run(
        [
            "perl",
            _script(tools, "training", "clean-corpus-n.perl"),
            out / "train",
            cfg.src,
            cfg.tgt,
            out / "train.clean",
            "1",
            str(cfg.max_length),
        ]
    )
    counts = {name: _count_lines(out / f"{name}.{cfg.src}") for name in (*SETS, "train.clean")}
    return {"folder": str(out), "lines": counts}


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def train_lm(
    cfg: BaselineConfig, tools: MosesTools, prepared: dict[str, Any], step: Step
) -> dict[str, Any]:
    """A 5-gram modified Kneser-Ney LM of the target side, binarised as a trie."""
    corpus = Path(prepared["folder"]) / f"train.clean.{cfg.tgt}"
    arpa = step.folder / "lm.arpa"
    binary = step.folder / f"lm.{cfg.tgt}.binary"
    argv: list[str | os.PathLike[str]] = [
        tools.root / "bin" / "lmplz",
        "-o",
        str(cfg.lm_order),
        "-S",
        "20%",
        "-T",
        step.folder,
    ]
    fallback = cfg.discount_fallback
    try:
        step.run([*argv, "--discount_fallback"] if fallback else argv, stdin=corpus, stdout=arpa)
    except StepError:
        # On a tiny corpus lmplz cannot estimate its Kneser-Ney discounts and aborts ("2-gram
        # discount out of range", or "... rerun with --discount_fallback"): the flag is its way
        # out (Moses' README says so too)
        said = step.log.read_text(encoding="utf-8")
        if fallback or not ("discount out of range" in said or "--discount_fallback" in said):
            raise
        fallback = True
        step.say_in_log(
            "lmplz: discount out of range (a small corpus): again with --discount_fallback"
        )
        step.run([*argv, "--discount_fallback"], stdin=corpus, stdout=arpa)
    step.run([tools.root / "bin" / "build_binary", "trie", arpa, binary])
    arpa.unlink()
    return {
        "lm": str(binary.resolve()),
        "bytes": binary.stat().st_size,
        "discount_fallback": fallback,
    }


def train_model(
    cfg: BaselineConfig,
    tools: MosesTools,
    prepared: dict[str, Any],
    lm: dict[str, Any],
    say: Callable[[str], None],
    step: Step,
) -> dict[str, Any]:
    """``train-model.perl`` steps 1-9 with MGIZA++ (both directions at once on 2+ threads),
    one command a step, resumed inside a killed training (:mod:`train_model`)."""
    root = step.folder.resolve()
    argv: list[str] = [
        "perl", str(_script(tools, "training", "train-model.perl")),
        "-root-dir", str(root),
        "-corpus", str(Path(prepared["folder"]).resolve() / "train.clean"),
        "-f", cfg.src, "-e", cfg.tgt,
        "-alignment", "grow-diag-final-and",
        "-reordering", "msd-bidirectional-fe",
        "-max-phrase-length", str(cfg.max_phrase_length),
        "-lm", f"0:{cfg.lm_order}:{lm['lm']}:8",
        "-mgiza", "-mgiza-cpus", "1",
        "-external-bin-dir", str((tools.root / "mgiza").resolve()),
        "-cores", str(cfg.threads),
    ]  # fmt: skip
    if cfg.threads > 1:
        argv.append("-parallel")
    ran = run_steps(step, argv, Layout(root, cfg.src, cfg.tgt), say)
    model = root / "model"
    table = model / "phrase-table.gz"
    step.need(table, model / "moses.ini", model / "lex.e2f", model / "lex.f2e")
    reordering = sorted(model.glob("reordering-table.*.gz"))
    if len(reordering) != 1:
        raise StepError(
            f"step train: expected one reordering table in {model}, found "
            f"{len(reordering)} (see {step.log})"
        )
    for scratch in ("corpus", "giza." + f"{cfg.src}-{cfg.tgt}", "giza." + f"{cfg.tgt}-{cfg.src}"):
        shutil.rmtree(root / scratch, ignore_errors=True)  # alignment scratch: gigabytes
    return {
        "model": str(model),
        "phrase_table": str(table),
        "reordering_table": str(reordering[0]),
        "phrase_pairs": _count_gz_lines(table),
        **ran,
    }


def _count_gz_lines(path: Path) -> int:
    import gzip

    with gzip.open(path, "rb") as f:
        return sum(1 for _ in f)


CUBE_PRUNING = "\n[search-algorithm]\n1\n\n[cube-pruning-pop-limit]\n1000\n\n[stack]\n1000\n"


def tune(
    cfg: BaselineConfig,
    tools: MosesTools,
    prepared: dict[str, Any],
    model: dict[str, Any],
    step: Step,
) -> dict[str, Any]:
    """MERT on dev with ``mert-moses.pl``; a killed run continues from its last iteration."""
    folder = step.folder.resolve()
    ini = folder / "untuned.ini"
    if not ini.exists():
        text = (Path(model["model"]) / "moses.ini").read_text(encoding="utf-8")
        write_text(ini, text + (CUBE_PRUNING if cfg.cube_pruning else ""))
    dev = Path(prepared["folder"]).resolve()
    dev_src, dev_ref = dev / f"dev.{cfg.src}", dev / f"dev.{cfg.tgt}"
    if cfg.dev_lines is not None:
        dev_src, dev_ref = (
            _head(dev_src, folder, cfg.dev_lines),
            _head(dev_ref, folder, cfg.dev_lines),
        )
    mert_work = folder / "mert-work"
    argv: list[str | os.PathLike[str]] = [
        "perl", tools.mert_moses, dev_src, dev_ref, tools.moses.resolve(), ini,
        "--mertdir", tools.mertdir.resolve(),
        "--decoder-flags", f"-threads {cfg.threads}",
        "--maximum-iterations", str(cfg.max_iterations),
        "--working-dir", mert_work,
    ]  # fmt: skip
    if cfg.mert_seed is not None:  # mert-moses.pl appends "--sctype" unspaced: the space
        argv += ["--mertmertargs", f"-r {cfg.mert_seed} "]
    if finished_iterations(mert_work):
        argv.append("--continue")  # from its last finished iteration
    elif mert_work.exists():
        shutil.rmtree(mert_work)  # killed in (or right after) an iteration it cannot go on from
    step.run(argv, cwd=folder)
    tuned = mert_work / "moses.ini"
    step.need(tuned)
    header = tuned.read_text(encoding="utf-8").splitlines()[:5]
    bleu = next((ln.split()[2] for ln in header if ln.startswith("# BLEU")), None)
    iterations = len(list(mert_work.glob("run*.moses.ini")))
    return {
        "ini": str(tuned),
        "dev_bleu_mert": float(bleu) if bleu else None,
        "iterations": iterations,
        "mert_seed": cfg.mert_seed,  # None: mert's own, from the system clock
    }


def _head(path: Path, folder: Path, n: int) -> Path:
    out = folder / f"{path.name}.first{n}"
    with open(path, encoding="utf-8") as f:
        lines = [line for _, line in zip(range(n), f, strict=False)]
    write_text(out, "".join(lines))
    return out


def _link(src: Path, dst: Path) -> None:
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def assemble(
    cfg: BaselineConfig,
    prepared: dict[str, Any],
    model: dict[str, Any],
    tuned: dict[str, Any],
    lm: dict[str, Any],
    step: Step,
) -> dict[str, Any]:
    """The system folder: the tuned ini with relative paths beside what it names."""
    out = step.folder
    files = {
        Path(model["phrase_table"]): "phrase-table.gz",
        Path(model["reordering_table"]): Path(model["reordering_table"]).name,
        Path(lm["lm"]): Path(lm["lm"]).name,
        Path(model["model"]) / "lex.e2f": "lex.e2f",
        Path(model["model"]) / "lex.f2e": "lex.f2e",
    }
    for src, name in files.items():
        _link(src, out / name)
    text = Path(tuned["ini"]).read_text(encoding="utf-8")
    for src, name in files.items():
        text = text.replace(str(src), name)
    text = re.sub(r"^\[threads\]\n\d+\n", "", text, flags=re.M)
    write_text(out / "moses.ini", text)
    unresolved = [path for path in _ini_paths(out / "moses.ini") if not (out / path).exists()]
    if unresolved:
        raise StepError(f"step system: {out / 'moses.ini'} names {unresolved}, not in {out}")
    prep = Path(prepared["folder"])
    for part in SETS:
        for lang in (cfg.src, cfg.tgt):
            _link(prep / f"{part}.{lang}", out / f"{part}.{lang}")
    return {"system": str(out.resolve())}


def _ini_paths(ini: Path) -> list[str]:
    parsed = read_ini(str(ini))
    paths = []
    for line in parsed.features:
        for key, value in line.args:
            if key == "path":
                paths.append(value)
    return paths


def evaluate(
    cfg: BaselineConfig, tools: MosesTools, system: dict[str, Any], step: Step
) -> dict[str, Any]:
    """Decode test with the tuned system (run from its folder); BLEU two ways."""
    folder = Path(system["system"])
    hyp = step.folder.resolve() / f"test.hyp.{cfg.tgt}"
    step.run(
        [tools.moses.resolve(), "-f", "moses.ini", "-threads", str(cfg.threads)],
        cwd=folder,
        stdin=folder / f"test.{cfg.src}",
        stdout=hyp,
    )
    ref = folder / f"test.{cfg.tgt}"
    record: dict[str, Any] = {"test_multi_bleu": multi_bleu(tools, ref, hyp), "hyp": str(hyp)}
    try:
        bleu, signature = sacrebleu_score(read_lines(hyp), read_lines(ref))
    except ImportError:  # sacreBLEU is optional (the experiments extra)
        return record
    return {**record, "test_bleu": bleu, "sacrebleu_signature": signature}


__all__ = ["DEFAULT_MERT_SEED", "BaselineConfig", "baseline_built", "check_counts", "run_baseline"]
