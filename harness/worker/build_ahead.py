"""Requests built ahead of their instants, a piece at a time, so that building never holds a send that is due.

What an arrival is sent with may need building first: a trace row's prompt from its blocks, a session's script and
first request. Such a build is a generator of `Piece`s: before each piece of work it yields what the piece is (its
kind and size), and it returns what the issue loop hands to `send`. `BuildAhead` runs the pieces of the arrivals
due next while the next send is further off than the piece will take — learnt as they run, per kind and size
(`PieceCosts`) — so a burst of long prompts due at one instant is built in the gaps before it, whatever the prompts' sizes,
and a piece that would run into a send waits until after it. The rows due first are built before the run's start
instant (`prime`, while the worker waits for it).

Memory is bounded: at most AHEAD_N built requests, AHEAD_BYTES of their bodies, AHEAD_S ahead of the next send, and
the one being built. A request not built ahead when it is taken (the previous one sent) is built then, whole, and
counted (`built_when_due`) when that build ends within a piece's margin of its instant.
"""
from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable, Iterator
from types import GeneratorType
from typing import Protocol

from tailrace.harness.worker.arrivals import Arrival, ScheduledArrivals
from tailrace.harness.workload.turns import Build, Piece, build_now

AHEAD_S = 2.0  # requests are built at most this far ahead of the next send ...
AHEAD_N = 256  # ... at most this many (a burst behind a stretch of short rows is reached in time) ...
AHEAD_BYTES = 64 << 20  # ... holding at most this much of bodies
PIECE_MARGIN_NS = 200_000  # a piece runs only while the next send is its expected time and this far off or more
FIRST_PIECE_NS = 5_000_000  # the expected time of a kind of piece not run yet
COST_HALF_LIFE_S = 1.0  # a piece's cost per unit: the longest recent, halving in this time


class PieceCosts:
    """How long a piece will take, learnt per kind and size class (its units' power of two): its units × the class's
    time per unit — the longer of its last and its longest recent, the longest halving every COST_HALF_LIFE_S (a piece
    slowed once by a stall is not held against its class for long, however rare the class). A piece's cost is not
    proportional to its size (a small body is mostly fixed costs), so a size class not run yet borrows from the nearest
    one that has: a smaller class's time per unit (dearer per unit), else a larger class's whole time — never an
    estimate below the likely truth — and a kind never run is expected to take FIRST_PIECE_NS."""

    def __init__(self) -> None:
        # (kind, class) → (the longest ns per unit, when it was seen, the last ns per unit)
        self._seen: dict[tuple[str, int], tuple[float, int, float]] = {}

    def per_unit_ns(self, kind: str, size_class: int, now_ns: int) -> float | None:
        seen = self._seen.get((kind, size_class))
        if seen is None:
            return None
        longest, when, last = seen
        return max(last, longest * 0.5 ** ((now_ns - when) / (COST_HALF_LIFE_S * 1e9)))

    def expected_ns(self, piece: Piece) -> int:
        now = time.perf_counter_ns()
        size_class = piece.units.bit_length()
        rate = self.per_unit_ns(piece.kind, size_class, now)
        if rate is not None:
            return int(rate * piece.units)
        known = sorted(c for k, c in self._seen if k == piece.kind)
        smaller = [c for c in known if c < size_class]
        if smaller:
            return int(self.per_unit_ns(piece.kind, smaller[-1], now) * piece.units)
        if known:  # a larger class: its time for its smallest size
            return int(self.per_unit_ns(piece.kind, known[0], now) * (1 << (known[0] - 1)))
        return FIRST_PIECE_NS

    def observe(self, piece: Piece, elapsed_ns: int) -> None:
        now = time.perf_counter_ns()
        key = (piece.kind, piece.units.bit_length())
        rate = elapsed_ns / max(1, piece.units)
        longest = self.per_unit_ns(*key, now) or 0.0
        self._seen[key] = (rate, now, rate) if rate >= longest else (*self._seen[key][:2], rate)


class Prepared(Protocol):
    """What a build returns for an arrival (a dataclass): the arrival it is for, and the bytes its request holds."""

    arrival: Arrival

    @property
    def body_bytes(self) -> int: ...


def body_bytes(item: Prepared | Arrival) -> int:
    """The bytes a built request holds (an arrival itself: nothing built)."""
    return 0 if isinstance(item, Arrival) else item.body_bytes


class BuildAhead:
    """The open loop's arrivals, each with what `send` is handed (`prepare(arrival)`: a build, or the item itself),
    built ahead in pieces that fit before the next send."""

    def __init__(self, arrivals: Iterator[Arrival], prepare: Callable[[Arrival], Build | object]) -> None:
        self.source, self.prepare = arrivals, prepare
        self.costs = PieceCosts()
        self.ready: deque[tuple[Arrival, object]] = deque()
        self.ready_bytes = 0
        self.peak_bytes = 0  # the most the built requests held at once ...
        self.peak_ready = 0  # ... and the most of them
        self.built_when_due = 0  # requests not built by their instant: built whole when taken
        self.upcoming: Arrival | None = next(arrivals, None)
        self._building: tuple[Arrival, Build, Piece] | None = None  # a build begun, and its next piece

    def take(self) -> tuple[Arrival, object] | None:
        """The next arrival and its item, built now if it is not yet (None: no arrival is left)."""
        if not self.ready:
            if self._building is not None:
                arrival, build, _ = self._building
                self._building = None
                self._done(arrival, build_now(build))
            elif self.upcoming is not None:
                arrival = self._draw()
                self._done(arrival, build_now(self.prepare(arrival)))
            else:
                return None
            # built whole now: late when it ended within a piece's margin of its instant (an arrival more than
            # AHEAD_S after the last send is taken, and built, right after that send: seconds ahead, not late)
            self.built_when_due += int(time.perf_counter_ns() + PIECE_MARGIN_NS >= arrival.intended_mono)
        arrival, item = self.ready.popleft()
        self.ready_bytes -= body_bytes(item)
        return arrival, item

    def fill(self, head_mono: int, next_send: Callable[[], int], between: Callable[[], None] | None = None) -> None:
        """Run the pieces of the builds due within AHEAD_S of `head_mono` (the next send's instant, or now once that
        is past), while each fits before `next_send()` (which may come earlier: a session's turn queued meanwhile).
        `between()` runs after each piece: answers are read, the turns they lead to queued."""
        costs = self.costs
        while True:
            if self._building is None:
                if not self._may_begin(head_mono):
                    return
                arrival = self._draw()
                build = self.prepare(arrival)
                if not isinstance(build, GeneratorType):
                    self._done(arrival, build)
                    continue
                piece = self._first(arrival, build)
                if piece is None:
                    continue
                self._building = (arrival, build, piece)
            arrival, build, piece = self._building
            started = time.perf_counter_ns()
            if next_send() - started <= costs.expected_ns(piece) + PIECE_MARGIN_NS:
                return
            try:
                following = next(build)
            except StopIteration as done:
                self._building = None
                self._done(arrival, done.value)
                following = None
            costs.observe(piece, time.perf_counter_ns() - started)
            if following is not None:
                self._building = (arrival, build, following)
            if between is not None:
                between()

    def prime(self, until_mono: int, between: Callable[[], None] | None = None, log=None) -> None:
        """Before the run: build the arrivals due first (the AHEAD_S after the first, at most AHEAD_N and
        AHEAD_BYTES), each piece only while `until_mono` (the start instant) is further off than it takes; what was
        built is said in `log`."""
        first = self.upcoming
        if first is None:
            return
        started = time.perf_counter_ns()
        self.fill(first.intended_mono, lambda: until_mono, between)
        if log is not None and self.ready:
            log(f"built the first {len(self.ready)} request(s) before the start instant ({self.ready_bytes / 2**20:.1f} "
                f"MiB, {(time.perf_counter_ns() - started) / 1e6:.0f} ms)")

    def rebase(self, delta_ns: int) -> None:
        """The start instant moved by `delta_ns` (an earlier start, once every worker is ready): every arrival, those
        built included, moves with it; a build begun is finished first."""
        if self._building is not None:
            arrival, build, _ = self._building
            self._building = None
            self._done(arrival, build_now(build))
        if isinstance(self.source, ScheduledArrivals):
            self.source.rebase(delta_ns)
        if self.upcoming is not None:
            self.upcoming = _moved(self.upcoming, delta_ns)
        moved = [(_moved(a, delta_ns), item) for a, item in self.ready]
        self.ready = deque((a, _restamped(item, a)) for a, item in moved)

    def _may_begin(self, head_mono: int) -> bool:
        upcoming = self.upcoming
        return upcoming is not None and len(self.ready) < AHEAD_N and self.ready_bytes < AHEAD_BYTES \
            and upcoming.intended_mono - max(head_mono, time.perf_counter_ns()) < AHEAD_S * 1e9

    def _draw(self) -> Arrival:
        arrival = self.upcoming
        self.upcoming = next(self.source, None)
        return arrival

    def _first(self, arrival: Arrival, build: Build) -> Piece | None:
        """Start `build` (up to its first piece); None: it needed none, and is done."""
        try:
            return next(build)
        except StopIteration as done:
            self._done(arrival, done.value)
            return None

    def _done(self, arrival: Arrival, item: object) -> None:
        self.ready.append((arrival, item))
        self.ready_bytes += body_bytes(item)
        self.peak_bytes = max(self.peak_bytes, self.ready_bytes)
        self.peak_ready = max(self.peak_ready, len(self.ready))

    def summary(self) -> dict:
        """What building ahead held at most (worker.json's scenario)."""
        return {"peak_requests": self.peak_ready, "peak_bytes": self.peak_bytes, "built_when_due": self.built_when_due}


def _moved(arrival: Arrival, delta_ns: int) -> Arrival:
    return dataclasses.replace(arrival, intended_mono=arrival.intended_mono + delta_ns)


def _restamped(item: Prepared | Arrival, arrival: Arrival) -> Prepared | Arrival:
    """`item` for `arrival` instead of its own."""
    return arrival if isinstance(item, Arrival) else dataclasses.replace(item, arrival=arrival)
