"""What a long analysis is doing, on a terminal: one line on stderr, rewritten in place — the rows, the statistic
being computed (k of n) and the seconds so far — once the analysis has taken DELAY_S; nothing when stderr is not a
terminal (a CI log, a pipe) or the analysis is quicker."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

DELAY_S = 2.0  # a quicker analysis shows nothing


class Progress:
    """The progress line of one analysis (`stage` before each statistic, `done` at its end)."""

    def __init__(self, stream: TextIO | None = None, delay_s: float = DELAY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.on = bool(getattr(self.stream, "isatty", lambda: False)())
        self.delay_s, self.clock = delay_s, clock
        self.started = clock()
        self.rows: int | None = None
        self.shown = False

    def stage(self, name: str, index: int, total: int) -> None:
        """The analysis is at statistic `name` (`index` of `total`)."""
        if not self.on:
            return
        elapsed = self.clock() - self.started
        if elapsed < self.delay_s:
            return
        rows = f"{self.rows:,} rows: " if self.rows is not None else ""
        self.stream.write(f"\r\x1b[Kanalysing {rows}{name.replace('_', ' ')} ({index} of {total}), {elapsed:.0f} s")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        """Clear the line (the summary is printed in its place)."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False
