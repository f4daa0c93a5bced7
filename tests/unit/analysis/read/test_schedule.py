"""The analysis' scheduler derives prefetching, freeing and threads from what each statistic declares."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from tailrace.analysis.read.schedule import Statistic, UndeclaredColumn, plan, run


class FakeLog:
    """The parts of ChunkColumns the scheduler uses, recording what it is told."""

    def __init__(self, names, derived=None, fits=True):
        self.schema = SimpleNamespace(names=list(names))
        self._derived = derived or {}
        self._fits = fits
        self.rows = 4
        self.calls: list[tuple] = []
        self.threads: dict[str, str] = {}

    def inputs_of(self, name):
        return self._derived.get(name, ())

    def fits(self):
        return self._fits

    def prefetch(self, batches):
        self.calls.append(("prefetch", [list(b) for b in batches]))

    def values(self, name):
        self.threads.setdefault(name, threading.current_thread().name)
        return np.arange(self.rows) + len(name)

    def frame(self, names):
        import pandas as pd
        return pd.DataFrame({n: self.values(n) for n in names})

    def release(self, *names):
        if names:
            self.calls.append(("release", sorted(names)))

    def spare(self, *names, next_read=None):
        if names:
            self.calls.append(("spare", sorted(names)))


def stat(name, reads=(), uses=(), **kw):
    return Statistic(name, tuple(reads), lambda c, r: name, tuple(uses), **kw)


def test_a_column_is_released_after_its_last_reader_and_retained_ones_never():
    log = FakeLog(["a", "b", "c"])
    s = plan([stat("one", "ab"), stat("two", "b"), stat("three", "c")], log, beside=False, keep=set(), retain=["c"])
    assert s.release == {"one": ["a"], "two": ["b"], "three": []}
    assert s.spare == {"one": ["b"], "two": [], "three": []}
    assert s.prefetch == [["a", "b"], ["c"]]


def test_each_spared_column_carries_the_step_it_is_read_at_next():
    """What spare's furthest-read-first release orders by: a spared column's next reader, as a step of the calling
    thread's time line (here the steps are the statistics in order)."""
    log = FakeLog(["a", "b", "c"])
    s = plan([stat("one", "abc"), stat("two", "b"), stat("three", "c"), stat("four", "ab")], log, beside=False,
             keep=set())
    assert s.next_read == {"one": {"a": 3, "b": 1, "c": 2}, "two": {"b": 3}, "three": {}, "four": {}}
    spares: list[dict] = []
    log.spare = lambda *names, next_read=None: spares.append(next_read)
    run([stat("one", "abc"), stat("two", "b"), stat("three", "c"), stat("four", "ab")], log, False, set())
    assert spares == [{"a": 3, "b": 1, "c": 2}, {"b": 3}, {}, {}]  # handed to the log after each statistic


def test_a_derived_columns_inputs_are_kept_until_every_derived_column_was_first_read():
    log = FakeLog(["t", "u", "off"], derived={"t_ref": ("t", "off"), "u_ref": ("u", "off")})
    s = plan([stat("one", ["t_ref"]), stat("two", ["u_ref"]), stat("three", ["t_ref"])], log, False, set())
    assert sorted(s.release["one"]) == ["t"]  # t_ref exists from here on
    assert sorted(s.release["two"]) == ["off", "u", "u_ref"]
    assert s.release["three"] == ["t_ref"]
    assert s.prefetch == [["t", "off"], ["u"]]


def test_side_statistics_start_after_their_anchor_only_where_the_log_fits():
    stats = [stat("first"), stat("late", beside="first"), stat("second")]
    fits = plan(stats, FakeLog([]), beside=True, keep=set())
    assert [s.name for s in fits.order] == ["first", "second"]
    assert [s.name for s in fits.side["first"]] == ["late"]
    tight = plan(stats, FakeLog([]), beside=False, keep=set())
    assert [s.name for s in tight.order] == ["first", "late", "second"] and not any(tight.side.values())


def test_results_are_dropped_after_their_last_user_unless_kept_or_used_beside():
    stats = [stat("a"), stat("b", uses=["a"]), stat("c", uses=["a", "b"]), stat("d", uses=["c"], beside="a")]
    s = plan(stats, FakeLog([]), beside=True, keep={"b"})
    assert s.drop == {"a": [], "b": [], "c": ["a"]}  # b is kept; c is used beside: never dropped
    s = plan(stats, FakeLog([]), beside=False, keep=set())
    assert s.drop == {"a": [], "b": [], "c": ["a", "b"], "d": ["c"]}


def test_run_computes_side_statistics_on_the_side_thread_with_columns_taken_beforehand():
    log = FakeLog(["x", "y"])
    seen = {}

    def beside(c, r):
        seen["thread"] = threading.current_thread().name
        seen["first"] = r["first"]
        return int(c.values("y").sum())

    stats = [Statistic("first", ("x",), lambda c, r: int(c.values("x").sum())),
             Statistic("side", ("y",), beside, uses=("first",), beside="first"),
             Statistic("last", ("x",), lambda c, r: r["side"] + 1, uses=("side",))]
    results = run(stats, log, keep_columns=False, keep={"first", "side", "last"})
    assert seen["thread"].startswith("tailrace-side") and log.threads["y"] == "MainThread"
    assert (results["first"], results["side"], results["last"]) == (10, 10, 11)
    assert log.calls[0] == ("prefetch", [["x"], ["y"]])
    assert ("release", ["y"]) in log.calls and log.calls[-1] == ("release", ["x"])


def test_a_statistic_cannot_read_a_column_it_did_not_declare():
    stats = [Statistic("sneaky", ("x",), lambda c, r: c.frame(["x", "y"]))]
    with pytest.raises(UndeclaredColumn, match="reads y without declaring it"):
        run(stats, FakeLog(["x", "y"]), keep_columns=False, keep=set())
