"""The names rescorer/cli/analysis.py and rescorer/analysis/ import from here, where the openers
and writers lived before they were split into :mod:`rescorer.io.inputs` (reading),
:mod:`rescorer.io.outputs` (writing) and :mod:`rescorer.io.jsonfiles` (JSON). Everything else
imports from those; delete this module once these do too."""

from __future__ import annotations

from rescorer.io.inputs import open_text
from rescorer.io.jsonfiles import write_json
from rescorer.io.outputs import atomic_path, open_output

__all__ = ["atomic_path", "open_output", "open_text", "write_json"]
