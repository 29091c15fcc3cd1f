"""Durations as users write them: ``90m``, ``2h``, ``1h30m`` (torch-free).

One grammar for every duration a user gives: ``train --max-time``, the Table 1 driver's
``--train`` budget, ``scripts/train_snapshots.py --snapshot`` and so the labels of its snapshot
folders (``fwd@6h``), which ``scripts/table1.py --plan`` checks.
"""

from __future__ import annotations

import re

from rescorer.errors import RescorerError

DURATION_FORMS = "5m, 2h, 90s or 1h30m (units d, h, m, s)"
MAX_DAYS = 365
MAX_SECONDS = MAX_DAYS * 86400  # the longest duration: no run is planned further ahead


def parse_duration(text: str) -> float:
    """Seconds of ``90m``, ``2h``, ``30s``, ``1h30m``, ``1.5h``, ``2d``. A number needs its
    unit: ``--max-time 5`` once meant 5 seconds, and a run meant for 5 minutes ended with
    exit 0 and an untrained model. At most MAX_DAYS days (``train --max-time 300000d`` ended
    in a traceback: a deadline past the clock's last timestamp)."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d*)?", text):
        raise RescorerError(f"duration {text!r} has no unit: expected e.g. {DURATION_FORMS}")
    parts = re.findall(r"(\d+(?:\.\d*)?)([dhms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise RescorerError(f"bad duration {text!r}: expected e.g. {DURATION_FORMS}")
    scale = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    seconds = sum(float(n) * scale[u] for n, u in parts)
    if seconds > MAX_SECONDS:
        raise RescorerError(f"duration {text!r} is over {MAX_DAYS}d: expected 0s to {MAX_DAYS}d")
    return seconds
