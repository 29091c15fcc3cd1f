"""User-facing errors. The command line turns them into one line on stderr and exit code 1."""

from __future__ import annotations


class RescorerError(Exception):
    """An error the user can act on (bad input, bad flags, missing files)."""


class InputError(RescorerError):
    """Malformed input: names the file, the 1-based line number and what was expected."""

    def __init__(self, path: str, lineno: int | None, message: str) -> None:
        self.path = path
        self.lineno = lineno
        self.detail = message
        where = f"{path}:{lineno}" if lineno is not None else path
        super().__init__(f"{where}: {message}")


def check(condition: bool, message: str) -> None:
    """Raise a RescorerError with ``message`` unless ``condition`` holds (for user errors only)."""
    if not condition:
        raise RescorerError(message)
