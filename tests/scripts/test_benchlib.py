"""scripts/benchlib.py's machine name: what a benchmark's sitting says the CPU was."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from benchlib import cpu_name

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx2 fma

processor\t: 1
model name\t: another CPU's block, not read
"""


def test_cpu_name_says_family_model_and_matrix_instructions(tmp_path: Path) -> None:
    """A virtual machine's bare "AMD EPYC" gets its family, model and which of the
    instructions that set the peaks it has."""
    info = tmp_path / "cpuinfo"
    info.write_text(ZEN3)
    assert cpu_name(str(info)) == (
        "AMD EPYC (family 25 model 1; avx2, no avx512f, no avx512_bf16, no amx_bf16)"
    )
    amx = ZEN3.replace("AMD EPYC", "Intel(R) Xeon(R) Processor").replace(
        "avx2 fma", "avx2 avx512f avx512_bf16 amx_bf16 amx_tile"
    )
    info.write_text(amx)
    assert cpu_name(str(info)).endswith("; avx2, avx512f, avx512_bf16, amx_bf16)")


def test_cpu_name_without_cpuinfo(tmp_path: Path) -> None:
    """No /proc/cpuinfo (another system) or no model name in it: what platform says."""
    expected = platform.processor() or platform.machine()
    assert cpu_name(str(tmp_path / "absent")) == expected
    (tmp_path / "empty").write_text("processor\t: 0\n")
    assert cpu_name(str(tmp_path / "empty")) == expected
