"""Progress of long runs on stderr, for people at a terminal and for batch logs.

On a terminal: a bar with the share of the input done and the ETA. Otherwise (nohup, Slurm, a
pipe): one line every ``every`` seconds, with what was done, the share of the input, the rate of
this run alone (a resumed run does not count the earlier runs' work) and the ETA.

A command that runs in stages (read a table, score, draw a map) gives each stage its own
Progress through :class:`Stages`: ``rescorer plot words: t-SNE map of 2,000 target words: ...``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

DEFAULT_EVERY = 30.0  # seconds between progress lines when stderr is not a terminal


def _duration(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


class Progress:
    """``update(done, fraction)``: ``done`` units so far in this run, ``fraction`` of the input
    read (0..1, or None when the input's size is unknown). ``share`` says what the fraction is
    of, in the lines (``of the input``)."""

    def __init__(
        self,
        label: str,
        unit: str,
        *,
        every: float = DEFAULT_EVERY,
        enabled: bool = True,
        stream: IO[str] | None = None,
        share: str = "of the input",
    ) -> None:
        self.label, self.unit, self.every, self.share = label, unit, every, share
        self.stream = stream or sys.stderr
        self.enabled = enabled and every > 0
        self.tty = self.enabled and self.stream.isatty()
        self.start = self.last = time.monotonic()
        self.first_fraction: float | None = None
        self.bar: Any = None  # drawn at the first update, below the lines said before it

    def _draw_bar(self) -> Any:
        from tqdm import tqdm

        return tqdm(
            total=100.0,
            file=self.stream,
            dynamic_ncols=True,
            bar_format="{l_bar}{bar}| {n:.1f}% [{elapsed}<{remaining}{postfix}]",
        )

    def update(self, done: int, fraction: float | None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self.first_fraction is None and fraction is not None:
            self.first_fraction = fraction  # where this run started (a resume starts midway)
        rate = done / max(now - self.start, 1e-9)
        if self.tty:
            if self.bar is None:
                self.bar = self._draw_bar()
            if fraction is not None:
                self.bar.update(100 * fraction - self.bar.n)
            self.bar.set_postfix_str(f"{done:,} {self.unit}, {rate:,.0f}/s", refresh=False)
            return
        if now - self.last < self.every:
            return
        self.last = now
        parts = [f"{self.label}: {done:,} {self.unit} in {_duration(now - self.start)}"]
        if fraction is not None:  # never 100.0% while the run goes on
            parts.append(f"{min(100 * fraction, 99.9):.1f}% {self.share}")
        parts.append(f"{rate:,.0f} {self.unit}/s")
        eta = self.eta(fraction, now)
        if eta is not None:
            parts.append(f"ETA {_duration(eta)}")
        print(", ".join(parts), file=self.stream, flush=True)

    def eta(self, fraction: float | None, now: float) -> float | None:
        if fraction is None or self.first_fraction is None or fraction <= self.first_fraction:
            return None
        speed = (fraction - self.first_fraction) / max(now - self.start, 1e-9)
        return (1.0 - fraction) / speed

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Stages:
    """The Progress of each stage of a command: ``stages("reading pt.gz", "lines")`` is labelled
    ``rescorer CMD: reading pt.gz``; all of them on or off (--quiet) and at one pace."""

    def __init__(self, command: str, *, every: float = DEFAULT_EVERY, enabled: bool = True) -> None:
        self.command, self.every, self.enabled = command, every, enabled

    def __call__(self, what: str, unit: str, share: str = "of the input") -> Progress:
        return Progress(
            f"{self.command}: {what}", unit, every=self.every, enabled=self.enabled, share=share
        )

    def reading(self, path: str, why: str = "") -> Progress:
        """The stage of one pass over a table: ``reading NAME (WHY): ... lines``."""
        from rescorer.io.inputs import display_name

        return self(f"reading {display_name(path)}{f' ({why})' if why else ''}", "lines")


#: What a first compile usually costs, as the commands say when they start one: 15-20 s for
#: train's steps and readout on an idle 2-core Zen 5 (BENCHMARKS.md), tens of seconds for
#: score's; a new user's 2-core machine at load 8-11 took 3 minutes (issue 39).
COMPILE_TYPICAL = "usually 15 s to 1 minute on an idle CPU, minutes on a busy one"


class Heartbeat:
    """While a step that reports nothing runs (a first ``torch.compile``), ``say(f"{text}
    (1m30s so far)")`` every ``every`` seconds from a helper thread; ``stop()`` (or leaving the
    ``with`` block) ends it. ``every`` 0 says nothing."""

    def __init__(self, say: Callable[[str], None], text: str, every: float) -> None:
        self.say, self.text, self.every = say, text, every
        self.start = time.monotonic()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        if every > 0:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while not self._stopped.wait(self.every):
            self.say(f"{self.text} ({_duration(time.monotonic() - self.start)} so far)")

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> Heartbeat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
