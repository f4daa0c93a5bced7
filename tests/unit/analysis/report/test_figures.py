"""The report's figures drawn by a process of their own (analysis/report/figures.py): the same figures as drawn here, and
drawn here whenever the child cannot — it died, hung, or an argument did not pickle — with the child always
stopped by PID."""
from __future__ import annotations

import os
import re
import signal

import numpy as np
import pytest

from tailrace.analysis.report import figures as figures_module
from tailrace.analysis.report.figures import InlineFigures, ProcessFigures, start_figures
from tailrace.contract.summary.base import Estimate
from tailrace.contract.summary.tables import LatencyRow

HEATMAP = ([LatencyRow(endpoint="e", region=r, count=1, errors=0, error_rate=0.0, achieved_rate=1.0,
                       percentiles={"p99": Estimate(value=v)}) for r, v in (("a", 9.0), ("b", 3.0))],)
CDFS = ({"a": (np.array([1.0, 2.0, 4.0]), np.array([0.8, 0.5, 0.1]))},)


def _same_figure(svg: str) -> str:
    """An SVG without what matplotlib makes up per process: its random ids and the date."""
    return re.sub(r"<dc:date>[^<]*</dc:date>", "", re.sub(r"\b([pm]|image)[0-9a-f]{10}\b", "ID", svg))


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def child():
    figures = ProcessFigures()
    yield figures
    figures.close()
    assert _gone(figures.pid)


def test_the_child_draws_the_figures_this_process_would(child):
    child.submit("heatmap_p99", *HEATMAP)
    child.submit("latency_cdfs", *CDFS)
    inline = InlineFigures()
    for name, args in (("heatmap_p99", HEATMAP), ("latency_cdfs", CDFS)):
        drawn = child.svg(name, lambda: pytest.fail("a submitted figure is not computed again"))
        assert drawn.startswith("<svg") and _same_figure(drawn) == _same_figure(inline.svg(name, lambda a=args: a))
    # asked for without a submit: drawn by the child all the same; nothing to draw stays None
    assert child.svg("heatmap_p99", lambda: HEATMAP).startswith("<svg")
    assert child.svg("decomposition_bars", lambda: ([],)) is None
    # the SPLIT and four GETs, less a figure the child handed back (this process had matplotlib: one of the two)
    assert child._answered + child.drawn_here == 5 and not child._broken


def test_a_child_that_died_leaves_the_figures_to_this_process(child):
    child.submit("heatmap_p99", *HEATMAP)
    os.kill(child.pid, signal.SIGKILL)
    child._process.wait()
    assert child.svg("heatmap_p99", lambda: HEATMAP).startswith("<svg")  # drawn here
    assert child._broken
    child.submit("latency_cdfs", *CDFS)  # no longer sent
    assert child.svg("latency_cdfs", lambda: CDFS).startswith("<svg")


def test_a_hung_child_is_given_up_after_the_timeout_and_killed(child, monkeypatch):
    monkeypatch.setattr(figures_module, "ANSWER_TIMEOUT_S", 0.5)
    child.svg("heatmap_p99", lambda: HEATMAP)  # the child is in its loop
    os.kill(child.pid, signal.SIGSTOP)  # stopped: it never answers
    assert child.svg("latency_cdfs", lambda: CDFS).startswith("<svg") and child._broken
    # the fixture's close() kills the stopped child (SIGKILL ends a stopped process) and reaps it


def test_an_argument_that_does_not_pickle_is_drawn_here(child):
    class Rows(list):  # a local class: pickle cannot find it by name
        pass

    rows = Rows(HEATMAP[0])
    child.submit("heatmap_p99", rows)
    assert child._broken
    assert child.svg("heatmap_p99", lambda: (rows,)).startswith("<svg")


def test_a_figure_that_fails_in_the_child_fails_here_as_it_would_inline(child):
    child.submit("latency_cdfs", "not curves")
    with pytest.raises(AttributeError):  # drawn again here, where it raises as InlineFigures' would
        child.svg("latency_cdfs", lambda: ("not curves",))
    assert not child._broken  # the child itself is fine
    assert child.svg("latency_cdfs", lambda: CDFS).startswith("<svg")


def test_only_the_declared_figures_are_drawn():
    with pytest.raises(ValueError, match="no figure named 'savefig'"):
        InlineFigures().svg("savefig", lambda: ())


def test_closing_a_child_that_never_answered_kills_it_at_once():
    figures = start_figures()
    assert isinstance(figures, ProcessFigures)
    figures.close()  # still importing matplotlib: not waited for
    assert _gone(figures.pid) and figures._process.returncode is not None


def test_the_figure_process_imports_no_statistics():
    """The figure process starts beside the analysis, on the same cores: importing what it draws with (plots.py)
    brings in matplotlib, numpy and pandas, never the statistics or scipy (0.7 CPU-s more, through one constant)."""
    import subprocess
    import sys

    probe = ("import sys; import tailrace.analysis.report.plots; "
             "print(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('tailrace.analysis.stats')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


# ten figures, each drawn of cheap arguments (most to None: nothing to draw)
TEN = [("heatmap_p99", HEATMAP), ("latency_cdfs", CDFS), ("decomposition_bars", ([],)),
       ("queue_vs_utilization", ([],)), ("token_heatmap", ([],)), ("ttft_bars", ([],)), ("trace_rates", ({},)),
       ("hardware_over_time", ({},)), ("server_timeline", ({}, 0)), ("accuracy_vs_load", ({},))]


def test_a_child_behind_hands_back_figures_this_process_draws_and_each_is_the_same(child):
    """Asked for the report while the child still has figures waiting, this process draws some of them itself:
    every figure is answered once, the same as drawn inline."""
    child.wait_ready(60)
    os.kill(child.pid, signal.SIGSTOP)  # it reads nothing until all ten wait
    try:
        for name, args in TEN:
            child.submit(name, *args)
    finally:
        os.kill(child.pid, signal.SIGCONT)
    inline = InlineFigures()
    for name, args in TEN:
        got = child.svg(name, lambda: pytest.fail("a submitted figure is not computed again"))
        expected = inline.svg(name, lambda a=args: a)
        assert (got is None and expected is None) or _same_figure(got) == _same_figure(expected)
    assert not child._broken and not child._here and not child._submitted
    assert 0 <= child.drawn_here <= 5  # at most half of the ten


@pytest.mark.parametrize("waiting, drawing, has_plots, failed, handed", [
    (9, True, False, None, 3),  # half of ten, less the four figures matplotlib's import costs
    (9, True, True, None, 5),
    (10, False, True, None, 5),
    (3, True, False, None, 0),  # too few to pay the import
    (0, False, True, None, 0),
    (9, True, True, "ImportError: no matplotlib", 0),  # every figure fails there: the asker draws them when asked
])
def test_the_child_hands_back_the_last_waiting_figures(waiting, drawing, has_plots, failed, handed):
    from tailrace.analysis.report.figures import _Board

    board = _Board(conn=None, failed=failed)
    board.pending = {f"f{i}": () for i in range(waiting)}
    board.drawing = "f_now" if drawing else None
    names = board._hand_back(has_plots)
    assert names == [f"f{i}" for i in range(waiting - handed, waiting)]
    assert list(board.pending) == [f"f{i}" for i in range(waiting - handed)]
