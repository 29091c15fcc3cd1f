"""What the benchmark scripts share: the machine's name, the commit measured, a table slice."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from typing import TYPE_CHECKING, Any

from isal import igzip

from rescorer.io.inputs import open_binary

if TYPE_CHECKING:
    import torch

    from rescorer.model.encdec import ModelConfig

HERE = os.path.dirname(os.path.abspath(__file__))


#: The instructions that set a CPU's matrix-product peaks, as /proc/cpuinfo names them.
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name from /proc/cpuinfo with its family, model and matrix instructions
    (a virtual machine may say no more than "AMD EPYC"), else what platform says."""
    info: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep:
                    break  # the first CPU's block ends
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    if "model name" not in info:
        return platform.processor() or platform.machine()
    flags = set(info.get("flags", "").split())
    isa = ", ".join(f if f in flags else f"no {f}" for f in ISA_FLAGS)
    return (
        f"{info['model name']} (family {info.get('cpu family', '?')} model "
        f"{info.get('model', '?')}; {isa})"
    )


def git_commit() -> str:
    """The short hash of the checkout these scripts are in (read it before measuring)."""
    proc = subprocess.run(
        ["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return proc.stdout.strip() or "unknown"


def write_slice(source: str, lines: int, path: str, *, cycle: bool = False) -> int:
    """The first ``lines`` lines of ``source`` as gzip: fewer if the table is shorter, or with
    ``cycle`` the table again from its start until there are ``lines``."""
    written = 0
    with igzip.open(path, "wb", compresslevel=1) as out:
        while written < lines:
            before = written
            with open_binary(source) as stream:
                for raw in stream:
                    if written == lines:
                        break
                    out.write(raw)
                    written += 1
            if not cycle or written == before:
                break
    return written


def paper_model_dir(table: str, folder: str, made_by: str) -> str:
    """A model folder at the paper's sizes with random weights (N(0, 0.01)/orthogonal, seed 0)
    and 15,000-word shortlists of ``table``: what the GPU benchmarks score with."""
    import torch

    from rescorer.io.table import read_table
    from rescorer.model.checkpoint import save_model_dir
    from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
    from rescorer.vocab import build_vocabs

    src_vocab, tgt_vocab = build_vocabs(((e.src, e.tgt) for e in read_table(table)), 15000, 15000)
    torch.manual_seed(0)
    model = EncoderDecoder(ModelConfig())
    init_weights_(model)
    save_model_dir(folder, model, src_vocab, tgt_vocab, {"made_by": made_by})
    return folder


def stream_triad(device: Any = "cpu", seconds: float = 1.0, mib: int = 256) -> float:
    """Bytes/s of a STREAM triad ``a = b + 3 c`` on ``device`` (a CPU: torch's threads), over fp32
    arrays of ``mib`` MiB each (far past any last-level cache): the best pass in ``seconds``.
    Counted as STREAM counts it: 12 bytes an element (two floats read, one written; the read
    a write allocates is not counted)."""
    import time

    import torch

    n = mib << 18  # fp32 elements
    b, c = torch.rand(n, device=device), torch.rand(n, device=device)
    a = torch.empty(n, device=device)
    torch.add(b, c, alpha=3.0, out=a)  # touch every page once
    cuda = torch.device(device).type == "cuda"
    best, end = 0.0, time.perf_counter() + seconds
    while True:
        if cuda:
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        if cuda:
            torch.cuda.synchronize(device)
        best = max(best, 12 * n / (time.perf_counter() - t))
        if time.perf_counter() > end:
            return best


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on a CPU)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def gemm_peak(device: torch.device, dtype: torch.dtype, n: int, seconds: float = 2.0) -> float:
    """Best FLOP/s of an n x n x n matrix product over ``seconds``."""
    import torch

    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    a @ b
    sync(device)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        for _ in range(4):
            a @ b
        sync(device)
        best = max(best, 4 * 2 * n**3 / (time.perf_counter() - t))
    return best


def model_macs(
    cfg: ModelConfig,
    encoder_steps: int,
    sources: int,
    positions: int,
    starts: int,
    *,
    tree: bool,
) -> float:
    """Multiply-adds of the model's matrix products, as the code runs them (no padding):
    ``encoder_steps`` encoder steps, the decoder terms of ``sources`` source rows, ``positions``
    decoder positions (EOS included) of which ``starts`` begin a target; ``tree``: the prefix
    tree decoder (``Scorer``'s default), else the padded one (``decoder_states``, also training).

    rescorer/model/encdec.py, rescorer/score/scorer.py and rescorer/score/trees.py run:
    - every encoder step (the first too: h_0 = 0 goes through the products): the input
      projection [W_r; W_u; W] e (E x 3H), then [U_r; U_u] h and U (r h) (3 H x H);
    - once per source row: s0 = tanh(W_init c + b) (H x H) and [C_r; C_u; C; O_c] c
      (H x (3H+PM)); a row per source in the tree, per source and batch in the padded decoder;
    - at every decoder position, the readout: O_h s (H x PM), O_y f(y_prev) (E x PM; f is zero
      at a target's first word, the product runs all the same), W_1 m (M x E), W_2 (E x V);
    - the decoder recurrence [U_r; U_u] s, U (r s) (3 H x H) at every position but those that
      begin a target: there the state is s0 itself and no step runs (the tree's depth 0, row 0
      of ``decoder_states``). ``starts`` is one per source in the tree (targets under a source
      share their first position) and one per pair in the padded decoder;
    - the decoder's input projection (E x 3H) with its step in the tree; the padded decoder
      projects every target word at once, its last one too, whose step never runs.
    """
    H, E, V = cfg.hidden_size, cfg.embed_size, cfg.tgt_rows
    PM = cfg.maxout_units * cfg.maxout_pool
    projection, recurrence = E * 3 * H, 3 * H * H
    per_source = H * H + H * (3 * H + PM)
    readout = H * PM + E * PM + cfg.maxout_units * E + E * V
    steps = positions - starts
    decoder = readout * positions + recurrence * steps
    decoder += projection * (steps if tree else positions)
    return float((projection + recurrence) * encoder_steps + per_source * sources + decoder)
