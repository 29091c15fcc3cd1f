"""The one duration grammar (rescorer/durations.py)."""

from __future__ import annotations

import pytest

from rescorer.durations import parse_duration
from rescorer.errors import RescorerError


def test_parse_duration() -> None:
    assert parse_duration("90m") == 5400
    assert parse_duration("2h") == 7200
    assert parse_duration("30s") == 30
    assert parse_duration("1h30m") == 5400
    assert parse_duration("1.5h") == 5400
    for bad in ("", "m", "3x", "1h 30m", "-1m"):
        with pytest.raises(RescorerError, match="bad duration"):
            parse_duration(bad)
    for bare in ("45", "5", "0", "1.5"):  # issue 27, item 4: --max-time 5 meant 5 seconds
        with pytest.raises(
            RescorerError, match=r"has no unit: expected e\.g\. 5m, 2h, 90s or 1h30m"
        ):
            parse_duration(bare)
