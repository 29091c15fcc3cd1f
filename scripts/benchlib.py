"""What the benchmark scripts share: the machine's name, the commit measured, a table slice."""

from __future__ import annotations

import os
import platform
import subprocess
from typing import Any

from isal import igzip

from rescorer.io.inputs import open_binary

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (else what platform says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
