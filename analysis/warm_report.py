"""The report of a run this process drives (`tailrace run`, `tailrace master`), ready when the run ends.

Importing the statistics and matplotlib takes ~1.5 s of CPU (scipy.stats alone ~0.9 s). A `WarmReport` is a child
process started with the run: it imports them, and starts the figure process, at idle priority (SCHED_IDLE: it
runs only on a core nothing else wants, so the load it overlaps is not disturbed), then waits for one request on its
stdin. When the run ends, `report` sends it the run directory; it returns to normal priority where the system lets
it (the root user, or an RLIMIT_NICE that allows it; else it goes on at idle priority, on a machine whose load just
ended) and analyses and writes the report exactly as `analyze_and_report` does in process, printing to the same
terminal; its exit code is the run's. A child that cannot start, or a machine without the analysis' libraries,
leaves the caller to analyse in process as before.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tailrace.contract.exit_codes import internal_error

# what the analysis needs beyond the generator's install (pyproject's [analysis] extra)
ANALYSIS_MODULES = ("pandas", "scipy", "matplotlib")
CLOSE_TIMEOUT_S = 2.0  # a child sent SIGTERM that has not exited by then is killed


def analysis_installed() -> bool:
    """Whether this install has the analysis' libraries (a generator-only install does not)."""
    return all(importlib.util.find_spec(name) is not None for name in ANALYSIS_MODULES)


class WarmReport:
    """`python -m tailrace.analysis.warm_report`: started at once, asked once (`report`), or stopped (`close`: SIGTERM,
    then by PID). Never asked, it exits by itself when this process goes away (its stdin closes)."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tailrace.analysis.warm_report"], stdin=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})

    @property
    def pid(self) -> int:
        return self._process.pid

    def report(self, run_dir: Path, quiet: bool, export, command: str) -> int | None:
        """Analyse `run_dir` and write its report in the child; its exit code (analyze_and_report's), or None where
        the child could not be asked (it died): the caller analyses in process."""
        request = {"run_dir": str(run_dir), "quiet": quiet, "command": command,
                   "export": export.model_dump(mode="json") if export is not None else None}
        if self._process.poll() is not None or self._process.stdin is None or self._process.stdin.closed:
            return None  # it died (or was asked already)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            self._process.stdin.write((json.dumps(request) + "\n").encode())
            self._process.stdin.close()
        except (OSError, ValueError):  # a broken pipe: it is gone
            self.close()
            return None
        try:
            code = self._process.wait()
        except BaseException:
            self.close()
            raise
        return code if code >= 0 else None  # killed by a signal: nothing it said can be trusted

    def close(self) -> None:
        """Stop it if it still runs (never asked, or the caller was interrupted while it analysed): SIGTERM, on
        which it stops its figure process; then by PID after CLOSE_TIMEOUT_S."""
        if self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdin is not None and not self._process.stdin.closed:
            try:
                self._process.stdin.close()
            except OSError:
                pass


def start_warm_report() -> WarmReport | None:
    """A WarmReport, or None where the analysis is not installed or no process can be started."""
    if not analysis_installed():
        return None
    try:
        return WarmReport()
    except OSError:
        return None


def _priority(pid: int, idle: bool) -> bool:
    """Move `pid` (0: this process) to SCHED_IDLE, or back to SCHED_OTHER; whether the system let it."""
    try:
        policy = os.SCHED_IDLE if idle else os.SCHED_OTHER
        os.sched_setscheduler(pid, policy, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or not allowed
        return False
    return True


def _serve() -> int:
    """The child: warm up at idle priority, then answer one request (none: exit 0)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C during the run is the parent's to handle
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # stopped: the figures' finally runs
    idle = _priority(0, idle=True)
    from tailrace.analysis.report.figures import start_figures

    figures = start_figures()  # its child inherits the idle priority: it imports matplotlib meanwhile
    try:
        import tailrace.analysis.analyze  # noqa: F401 — the statistics, imported before the run ends
        from tailrace.analysis.analyze_command import analyze_and_report

        line = sys.stdin.readline()
    except BaseException:
        figures.close()
        raise
    if not line:
        figures.close()
        return 0
    if idle:
        _priority(0, idle=False)
        pid = getattr(figures, "pid", None)
        if pid is not None:
            _priority(pid, idle=False)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    request = json.loads(line)
    export = None
    if request["export"] is not None:
        from tailrace.contract.profile.settings import OtelExport

        export = OtelExport.model_validate(request["export"])
    try:  # it closes the figures
        return analyze_and_report(Path(request["run_dir"]), None, quiet=request["quiet"], exits=True,
                                  figures=figures, export=export, command=request["command"])
    except Exception as exc:  # noqa: BLE001 — as the command itself says it: one line, exit code INTERNAL
        return internal_error(request["command"].removeprefix("tailrace "), exc)

if __name__ == "__main__":
    try:
        sys.exit(_serve())
    except KeyboardInterrupt:
        sys.exit(130)
