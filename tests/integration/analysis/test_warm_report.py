"""The report of a run `tailrace run` / `tailrace master` drive, from a child that imported the analysis while the
run was set up (analysis/warm_report.py): ready, then asleep (no CPU beside the load) until asked, the same report
and exit code as the analysis in process, and stopped by PID where it is never asked or died."""
from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest

from tailrace.analysis.warm_report import WarmReport
from tailrace.cli import main
from tailrace.run_command import report_run
from tests.unit.analysis.test_same_numbers import differences
from tests.unit.analysis.test_saved_runs import SAVED

pytestmark = pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine


def _cpu_s(pid: int) -> float:
    """CPU seconds of `pid` and its children (the figure process)."""
    process = psutil.Process(pid)
    return sum(sum(p.cpu_times()[:2]) for p in (process, *process.children(recursive=True)))


def _copy(name: str, where) -> os.PathLike:
    shutil.copytree(SAVED / name, where)
    return where


def test_the_warm_child_is_ready_then_asleep_and_writes_the_same_report_as_in_process(tmp_path):
    here, warm_dir = _copy("demo", tmp_path / "here"), _copy("demo", tmp_path / "warm")
    in_process = main(["analyze", str(here), "--quiet"])
    warm = WarmReport()
    try:
        assert warm.wait_ready(60), "the child never said it was ready"
        assert "scipy/stats/" in Path(f"/proc/{warm.pid}/maps").read_text()  # the statistics' libraries are loaded
        (figures,) = psutil.Process(warm.pid).children()
        assert "matplotlib/" in Path(f"/proc/{figures.pid}/maps").read_text()  # and the figures' (no import after)
        time.sleep(0.5)  # what a load beside them would get from them: nothing
        before = _cpu_s(warm.pid), _cpu_s(figures.pid)
        time.sleep(1.0)
        assert _cpu_s(warm.pid) - before[0] < 0.05 and _cpu_s(figures.pid) - before[1] < 0.05
        code = warm.report(warm_dir, quiet=True, export=None, command="tailrace run")
    finally:
        warm.close()
    assert code == in_process
    ours = json.loads((warm_dir / "report" / "summary.json").read_text())
    theirs = json.loads((here / "report" / "summary.json").read_text())
    assert not differences(ours, theirs)
    assert (warm_dir / "report" / "index.html").stat().st_size > 0
    assert not psutil.pid_exists(warm.pid) or psutil.Process(warm.pid).status() == psutil.STATUS_ZOMBIE


def test_a_child_never_asked_is_stopped_and_one_that_died_leaves_the_report_to_the_caller(tmp_path):
    idle = WarmReport()
    deadline = time.monotonic() + 20
    while not (figures := psutil.Process(idle.pid).children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert figures, "the child never started its figure process"
    idle.close()
    assert idle._process.returncode is not None
    gone, alive = psutil.wait_procs(figures, timeout=5)  # its figure process goes with it
    assert not alive, alive

    run_dir = _copy("demo", tmp_path / "run")
    dead = WarmReport()
    os.kill(dead.pid, signal.SIGKILL)
    dead._process.wait()
    assert dead.report(run_dir, quiet=True, export=None, command="tailrace run") is None
    code = report_run(run_dir, True, None, "tailrace run", dead)  # analysed here instead
    recorded = json.loads((SAVED / "demo.summary.json").read_text())
    assert code == recorded["exit_code"]
    assert not differences(json.loads((run_dir / "report" / "summary.json").read_text()), recorded)


def test_a_request_the_child_cannot_read_is_tailraces_failure_not_a_verdict(tmp_path, capfd):
    """Exit 5 (INTERNAL) with one line, never 1 — which a CI gate would read as an SLO that failed."""
    warm = WarmReport()
    try:
        assert warm.wait_ready(60)
        warm._process.stdin.write(b"not json\n")
        warm._process.stdin.close()
        assert warm._process.wait(timeout=60) == 5
    finally:
        warm.close()
    assert "internal error" in capfd.readouterr().err


def test_a_child_stopped_mid_import_goes_without_a_word_and_takes_its_figure_process(capfd):
    """A run refused early (a bad pipeline file) stops the child while it still imports: nothing on the run's
    terminal and no figure process left. (In CI the SIGTERM once landed in a native module's init, and the
    SystemExit the old handler raised there came out as "ImportError: initialization failed" with its traceback: a
    window too narrow to hit on purpose; the handler now raises nothing — it kills the figure process and exits.)"""
    for delay_s in (0.1, 0.4, 0.7, 1.0):  # through the imports (~1.4 s)
        warm = WarmReport()
        deadline = time.monotonic() + 20
        while not (figures := psutil.Process(warm.pid).children()) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay_s)
        warm.close()
        assert warm._process.returncode in (-signal.SIGKILL, 128 + signal.SIGTERM, -signal.SIGTERM), delay_s
        gone, alive = psutil.wait_procs(figures, timeout=5)
        assert not alive, (delay_s, alive)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Error" not in err, err[-2000:]
