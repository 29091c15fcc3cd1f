"""What the benchmark scripts share: the machine's name, the commit measured, a table slice."""

from __future__ import annotations

import os
import platform
import subprocess

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
