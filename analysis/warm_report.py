"""The report of a run this process drives (`tailrace run`, `tailrace master`), ready sooner after the run ends.

Importing the statistics and matplotlib takes ~1.5 s of CPU (scipy.stats alone ~0.9 s), which the report used to
wait for once the load was over. A `WarmReport` is a child process started with the run: it imports them and starts
the figure process (and waits for its imports) while the run is set up (the endpoint boots, the proxies start), says
it is ready, and then sleeps on its stdin — so it never takes a core from the load. The run waits for that word
(`wait_ready`) before its load generators start. When the run ends, `report` sends it the run directory; it analyses
and writes the report exactly as `analyze_and_report` does in process, printing to the same terminal; its exit code
is the run's. A child that cannot start or dies leaves the caller to analyse in process, as before. (Not SCHED_IDLE
during the load: an idle-class task still gets its share and keeps the core to the next tick, 4 ms here —
docs/DECISIONS.md.)
"""
from __future__ import annotations

import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from tailrace.contract.exit_codes import internal_error

# what the analysis needs beyond the generator's install (pyproject's [analysis] extra)
ANALYSIS_MODULES = ("pandas", "scipy", "matplotlib")
READY_TIMEOUT_S = 30.0  # the run starts without the child's word after this (it goes on importing meanwhile)
CLOSE_TIMEOUT_S = 2.0  # a child sent SIGTERM that has not exited by then is killed
READY = b"r"


def analysis_installed() -> bool:
    """Whether this install has the analysis' libraries (a generator-only install does not)."""
    return all(importlib.util.find_spec(name) is not None for name in ANALYSIS_MODULES)


class WarmReport:
    """`python -m tailrace.analysis.warm_report FD`: started at once, it writes READY to FD once its imports are
    done; asked once (`report`), or stopped (`close`: SIGTERM, then by PID). Never asked, it exits by itself when
    this process goes away (its stdin closes)."""

    def __init__(self) -> None:
        ready, theirs = os.pipe()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tailrace.analysis.warm_report", str(theirs)], stdin=subprocess.PIPE,
                pass_fds=(theirs,), env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                start_new_session=True)  # a terminal's Ctrl-C is the caller's: one in the child's start printed
            # "Fatal Python error: init_import_site" with a traceback to the run's terminal
        except BaseException:
            os.close(ready)
            raise
        finally:
            os.close(theirs)
        self._ready_fd: int | None = ready

    @property
    def pid(self) -> int:
        return self._process.pid

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Block until the child's imports are done (True), it died, or `timeout_s` passed (False)."""
        if self._ready_fd is None:
            return False
        readable, _, _ = select.select([self._ready_fd], [], [], timeout_s)
        word = os.read(self._ready_fd, 1) if readable else b""
        os.close(self._ready_fd)
        self._ready_fd = None
        return word == READY

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
        if self._ready_fd is not None:
            os.close(self._ready_fd)
            self._ready_fd = None
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


_figures: list = []  # the child's figure process, once started: stopped with it


def _terminated(signum: int, frame) -> None:
    """SIGTERM (the run ended early, or was interrupted): stop the figure process by PID and exit at once. Raising
    SystemExit instead would interrupt whatever runs — an import half done prints its traceback to the run's
    terminal (a run refused for a bad pipeline file did, in CI)."""
    for figures in _figures:
        figures.stop_now()
    os._exit(128 + signum)


def _serve(ready_fd: int) -> int:
    """The child: import, say READY on `ready_fd`, then answer one request (none: exit 0)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C during the run is the parent's to handle
    signal.signal(signal.SIGTERM, _terminated)
    from tailrace.analysis.read import process_memory

    process_memory.settle()  # this child analyses, then exits; first, before any thread starts (process_memory.py)
    from tailrace.analysis.report.figures import start_figures

    figures = start_figures()  # it imports matplotlib meanwhile, on the other core
    _figures.append(figures)
    try:
        import tailrace.analysis.analyze  # noqa: F401 — the statistics, imported before the run's load starts
        from tailrace.analysis.analyze_command import analyze_and_report

        figures.wait_ready(READY_TIMEOUT_S)  # its matplotlib import must not overlap the load either
        try:
            os.write(ready_fd, READY)
            os.close(ready_fd)
        except OSError:
            pass  # the parent stopped listening: it asks or closes all the same
        line = sys.stdin.readline()
    except BaseException:
        figures.close()
        raise
    if not line:
        figures.close()
        return 0
    signal.signal(signal.SIGINT, signal.default_int_handler)
    command = "run"
    try:  # anything that fails here is tailrace's own failure (exit 5), never a verdict's exit code (1: FAIL)
        request = json.loads(line)
        command = request["command"].removeprefix("tailrace ")
        export = None
        if request["export"] is not None:
            from tailrace.contract.profile.settings import OtelExport

            export = OtelExport.model_validate(request["export"])
        return analyze_and_report(Path(request["run_dir"]), None, quiet=request["quiet"], exits=True,
                                  figures=figures, export=export, command=request["command"])  # closes the figures
    except Exception as exc:  # noqa: BLE001 — as the command itself says it: one line, exit code INTERNAL
        figures.close()
        return internal_error(command, exc)


if __name__ == "__main__":
    try:
        sys.exit(_serve(int(sys.argv[1])))
    except KeyboardInterrupt:
        sys.exit(130)
