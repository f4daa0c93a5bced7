"""What a long analysis is doing, on a terminal: one line on stderr, rewritten in place — the rows, the seconds so far,
the statistic being computed (k of n) and the columns being read with the rows read of the total — once the
analysis has taken DELAY_S, and again every TICK_S while a statistic or a pass over the chunks goes on; nothing when
stderr is not a terminal (a CI log, a pipe) or the analysis is quicker."""
from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TextIO

DELAY_S = 2.0  # a quicker analysis shows nothing
TICK_S = 0.5  # the line is drawn again this often while nothing else changes it
NAMES_SHOWN = 2  # the columns of a pass named; the others counted


class Progress:
    """The progress line of one analysis: `stage` before each statistic, `reading` as a pass over the chunks puts
    each chunk in (from any thread), `done` at its end. `tick_s`: how often a thread draws the line again (None:
    only when told)."""

    def __init__(self, stream: TextIO | None = None, delay_s: float = DELAY_S,
                 clock: Callable[[], float] = time.monotonic, tick_s: float | None = TICK_S) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.on = bool(getattr(self.stream, "isatty", lambda: False)())
        self.delay_s, self.clock = delay_s, clock
        self.started = clock()
        self.rows: int | None = None
        self.shown = False
        self._stage: str | None = None
        self._passes: dict[tuple[int, tuple[str, ...]], tuple[int, int]] = {}  # (thread, columns) → (rows read, of)
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.on and tick_s is not None:
            self._ticker = threading.Thread(target=self._tick, args=(tick_s,), name="tailrace-progress", daemon=True)
            self._ticker.start()

    def stage(self, name: str, index: int, total: int) -> None:
        """The analysis is at statistic `name` (`index` of `total`)."""
        if not self.on:
            return
        with self._lock:
            self._stage = f"{name.replace('_', ' ')} ({index} of {total})"
        self.draw()

    def reading(self, columns: Sequence[str], rows_read: int, rows: int) -> None:
        """A pass over the chunks reading `columns` has put `rows_read` of the log's `rows` in (a pass ends when they
        are equal)."""
        if not self.on:
            return
        key = (threading.get_ident(), tuple(columns))
        with self._lock:
            self.rows = rows if self.rows is None else self.rows  # known from the first pass on
            if rows_read >= rows:
                self._passes.pop(key, None)
            else:
                self._passes[key] = (rows_read, rows)

    def draw(self) -> None:
        """Write the line again (once DELAY_S has passed), fitted to the terminal's width."""
        if not self.on or self._ended.is_set():
            return
        elapsed = self.clock() - self.started
        if elapsed < self.delay_s:
            return
        with self._lock:
            parts = [self._stage] if self._stage else []
            if self._passes:  # the pass begun last: the one the analysis now waits on, or reads ahead
                columns, (read, of) = next(reversed(self._passes.items()))
                parts.append(f"reading {_names(columns[1])}: {_rows(read)} of {_rows(of)} rows")
            head = f"analysing {self.rows:,} rows, {elapsed:.0f} s" if self.rows is not None else \
                f"analysing, {elapsed:.0f} s"
            line = f"{head}: {'; '.join(parts)}" if parts else head  # (a narrow terminal cuts the columns' names)
            width = _width(self.stream) - 1
            if len(line) > width:
                line = line[:width - 1] + "…"
            self.stream.write(f"\r\x1b[K{line}")
            self.stream.flush()
            self.shown = True

    def done(self) -> None:
        """Stop drawing and clear the line (the summary is printed in its place)."""
        self._ended.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        with self._lock:
            if self.shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self.shown = False

    def _tick(self, tick_s: float) -> None:
        while not self._ended.wait(tick_s):
            self.draw()


def _width(stream: TextIO) -> int:
    """The columns of the terminal `stream` writes to ($COLUMNS first, as shutil's; 80 where it cannot be told)."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return shutil.get_terminal_size((80, 24)).columns


def _names(columns: Sequence[str]) -> str:
    """The first NAMES_SHOWN columns' names, and how many more."""
    shown = ", ".join(columns[:NAMES_SHOWN])
    return shown if len(columns) <= NAMES_SHOWN else f"{shown} and {len(columns) - NAMES_SHOWN} more"


def _rows(n: int) -> str:
    """A row count, short: millions to one decimal (a terminal line is 80 characters)."""
    return f"{n / 1e6:.1f} M" if n >= 1_000_000 else f"{n:,}"
