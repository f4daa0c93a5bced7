"""The analysis' statistics as declarations, and the small scheduler that runs them over the request log.

Each `Statistic` declares the log columns it reads and the earlier results it uses; from the declarations alone
the scheduler derives
- what to read ahead: the columns not yet loaded, in the order the statistics first read them, one batch per
  statistic, read in the background while earlier statistics compute (`ChunkColumns.prefetch`);
- when to free a column: released after the last statistic that reads it, spared (kept while memory allows,
  else read again) after one that a later statistic follows — above the budget, the spared column read again last
  goes first (`next_read`: the step each is read at next); `retain` columns are kept to the end;
- when to drop a result: after its last user, unless it is one of the results asked for;
- which thread computes what: a statistic with `beside="X"` computes in one side thread, started when X is done,
  where the whole log fits in memory (its columns are taken on the calling thread when it starts); otherwise it
  computes at its own place in the list like the others.

A statistic reads the log only through its `Columns`, which refuses a column it did not declare, so the
declarations the scheduler works from are the reads that happen.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import pandas as pd

from tailrace.analysis.read.chunks import ChunkColumns
from tailrace.analysis.read.frames import frame_of
from tailrace.analysis.read.progress import Progress


class UndeclaredColumn(KeyError):
    """A statistic read a column it did not declare."""


@dataclass(frozen=True)
class Statistic:
    """One statistic: its name (its result's key), the columns it reads, the results it uses, what it computes."""

    name: str
    reads: tuple[str, ...]
    compute: Callable[[Columns, Results], Any]
    uses: tuple[str, ...] = ()
    beside: str | None = None  # where the log fits: computed in the side thread, started after this statistic


class Columns:
    """What one statistic may read of the log: its declared columns (from the log, or taken beforehand)."""

    def __init__(self, log: ChunkColumns, declared: tuple[str, ...], taken: dict[str, Any] | None = None) -> None:
        self._log, self._declared, self._taken = log, set(declared), taken

    def _check(self, names: Iterable[str]) -> list[str]:
        names = list(names)
        undeclared = [n for n in names if n not in self._declared]
        if undeclared:
            raise UndeclaredColumn(f"reads {', '.join(undeclared)} without declaring it")
        return names

    def frame(self, names: Iterable[str]):
        names = self._check(names)
        if self._taken is None:
            return self._log.frame(names)
        return frame_of({n: self._taken[n] for n in names}, pd.RangeIndex(self._log.rows))

    def values(self, name: str):
        self._check([name])
        return self._log.values(name) if self._taken is None else self._taken[name]

    def spare(self, *names: str) -> None:
        """Within a statistic that reads its columns a few at a time: these are read no more by it."""
        if self._taken is None:
            self._log.spare(*self._check(names))

    def fits(self) -> bool:
        return self._log.fits()

    @property
    def rows(self) -> int:
        return self._log.rows


class Results:
    """The results computed so far, by statistic name; a side thread's result is waited for when first asked."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        value = self._values[name]
        if isinstance(value, Future):
            value = self._values[name] = value.result()
        return value

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self._values else default

    def put(self, name: str, value: Any) -> None:
        self._values[name] = value

    def drop(self, name: str) -> None:
        self._values.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._values


def _schema_inputs(log: ChunkColumns, names: Iterable[str]) -> list[str]:
    """The chunk columns behind `names` (a derived column's inputs in its place)."""
    out: list[str] = []
    for name in names:
        out += [name] if name in log.schema.names else list(log.inputs_of(name))
    return out


@dataclass
class Schedule:
    """The order the statistics run in, and what is freed after each: derived once from the declarations."""

    order: list[Statistic]  # as they run on the calling thread (the side ones at their start)
    side: dict[str, list[Statistic]]  # statistic → the side statistics started after it
    release: dict[str, list[str]]  # statistic → columns no later statistic reads
    spare: dict[str, list[str]]  # statistic → columns it read that a later one reads again
    next_read: dict[str, dict[str, int]]  # statistic → each of its spare columns' next reader (its step)
    drop: dict[str, list[str]]  # statistic → results no later statistic uses
    prefetch: list[list[str]]  # chunk columns, one batch per statistic, in the order first read


def plan(statistics: list[Statistic], log: ChunkColumns, beside: bool, keep: set[str],
         retain: Iterable[str] = ()) -> Schedule:
    """Derive the schedule of `statistics` (given in the order each computes when nothing is beside) over `log`.

    A column is released after its last reader. A chunk column a derived one is computed from (a time on the
    reference clock from the local time and the offset) counts as read where each of those derived columns is
    first read: it is needed until they exist, and read again should one be computed again."""
    side = {s.name: [b for b in statistics if beside and b.beside == s.name] for s in statistics}
    order = [s for s in statistics if not (beside and s.beside)]
    # the statistics on the calling thread's time line, each with the step its reads count at (a side one's start)
    steps: list[tuple[str, Statistic]] = []
    for s in order:
        steps.append((s.name, s))
        steps += [(s.name, b) for b in side[s.name]]
    at_index = {name: i for i, name in enumerate(dict.fromkeys(at for at, _ in steps))}
    last_read: dict[str, str] = {}
    first_read: dict[str, str] = {}
    for at, s in steps:
        for c in s.reads:
            last_read[c] = at
            first_read.setdefault(c, at)
    for derived, first in first_read.items():
        for c in log.inputs_of(derived):
            if at_index[first] > at_index.get(last_read.get(c, ""), -1):
                last_read[c] = first
    retained = set(retain)
    release: dict[str, list[str]] = {s.name: [] for s in order}
    for c, at in last_read.items():
        if c not in retained:
            release[at].append(c)
    spare: dict[str, list[str]] = {s.name: [] for s in order}
    next_read: dict[str, dict[str, int]] = {s.name: {} for s in order}
    for i, (at, s) in enumerate(steps):
        later = {c for _, t in steps[i + 1:] for c in t.reads}
        spare[at] += [c for c in s.reads if c in later and c not in spare[at]]
        for c in s.reads:
            if c in later:
                next_read[at][c] = next(j for j in range(i + 1, len(steps)) if c in steps[j][1].reads)
    side_names = {b.name for bs in side.values() for b in bs}
    users: dict[str, list[tuple[str, Statistic]]] = {}
    for at, s in steps:
        for u in s.uses:
            users.setdefault(u, []).append((at, s))
    drop: dict[str, list[str]] = {s.name: [] for s in order}
    for name, used_by in users.items():
        # a result a side statistic uses stays until the end: the side thread may ask for it any time
        if name in keep or any(s.name in side_names for _, s in used_by):
            continue
        drop[max((at for at, _ in used_by), key=at_index.__getitem__)].append(name)
    prefetch, listed = [], set()
    for _, s in steps:
        batch = [c for c in dict.fromkeys(_schema_inputs(log, s.reads)) if c not in listed]
        listed |= set(batch)
        if batch:
            prefetch.append(batch)
    return Schedule(order, side, release, spare, next_read, drop, prefetch)


def run(statistics: list[Statistic], log: ChunkColumns, keep_columns: bool, keep: set[str],
        retain: Iterable[str] = (), progress: Progress | None = None) -> Results:
    """Compute `statistics` over `log`; returns the results (those in `keep`, and any nobody used).
    `keep_columns`: every column stays loaded (the Python API's `Analysis.requests`); `progress`: told of each
    statistic as it starts (analysis/read/progress.py)."""
    beside = log.fits()
    schedule = plan(statistics, log, beside, keep, retain)
    if not keep_columns:  # read whole in one pass (chunks.py's one_pass): what no statistic reads goes at once
        read = {c for s in statistics for c in _schema_inputs(log, s.reads)} | set(retain)
        log.release(*(c for c in log.schema.names if c not in read))
    log.prefetch(schedule.prefetch)
    results = Results()
    side = ThreadPoolExecutor(1, thread_name_prefix="tailrace-side") if beside else None
    try:
        if progress is not None:
            progress.rows = int(log.rows)
        for i, s in enumerate(schedule.order, 1):
            if progress is not None:
                progress.stage(s.name, i, len(schedule.order))
            results.put(s.name, s.compute(Columns(log, s.reads), results))
            for b in schedule.side[s.name]:  # (there are side statistics only where they run beside)
                if side is None:
                    raise RuntimeError(f"{b.name}: planned beside {s.name} without a side thread")
                taken = {c: log.values(c) for c in b.reads}  # on this thread: the log is read here only
                results.put(b.name, side.submit(b.compute, Columns(log, b.reads, taken), results))
            if not keep_columns:
                log.release(*schedule.release[s.name])
                spared = [c for c in schedule.spare[s.name] if c not in schedule.release[s.name]]
                log.spare(*spared, next_read=schedule.next_read[s.name])
            for name in schedule.drop[s.name]:
                results.drop(name)
    finally:
        if side is not None:
            side.shutdown(wait=True)
    return results
