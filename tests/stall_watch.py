"""A hung test run says where it hangs: under pytest-xdist, the controller watches for test reports, and when none
has come for STALL_S it prints the tests still running, every process below it (state, kernel wait channel,
command) and each worker's Python stacks (each worker dumps them on SIGUSR1 into a file beside its basetemp).

pytest-timeout cannot end every hang: not one in a process that is stopped, nor one in a teardown after the timeout
fired. CI then only says that it ran out of time; this says what was running and in what state."""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

# no test started or ended for this long: CI's longest phase is ~115 s (vLLM's setup); a test may shorten it
STALL_S = float(os.environ.get("TAILRACE_STALL_S", 600))
STACKS_WAIT_S = 3.0
STACKS_FILE = pytest.StashKey[object]()


class StallWatch:
    """The controller's view: which tests run, and when anything last happened."""

    def __init__(self, stacks_dir: Path) -> None:
        self.stacks_dir = stacks_dir
        self.running: dict[str, float] = {}
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def started(self, nodeid: str) -> None:
        with self.lock:
            self.running[nodeid] = self.last = time.monotonic()

    def ended(self, nodeid: str) -> None:
        with self.lock:
            self.running.pop(nodeid, None)
            self.last = time.monotonic()

    def watch(self) -> None:
        while True:
            time.sleep(min(30.0, STALL_S / 4))
            with self.lock:
                quiet_s = time.monotonic() - self.last
                running = dict(self.running)
            if quiet_s >= STALL_S:
                print(self.describe(quiet_s, running, psutil.Process().children()), file=sys.__stderr__, flush=True)
                with self.lock:
                    self.last = time.monotonic()  # again after another STALL_S, if it still hangs

    def describe(self, quiet_s: float, running: dict[str, float], workers: list[psutil.Process]) -> str:
        """What to print: the tests running, the processes below this one, and the stacks `workers` dump."""
        now = time.monotonic()
        lines = [f"\nstall watch: no test has started or ended for {quiet_s:.0f} s"]
        lines += [f"  running: {nodeid} (for {now - t:.0f} s)" for nodeid, t in running.items()]
        lines.append("  processes below the test run (pid ppid state wchan age command):")
        me = psutil.Process()
        for proc in me.children(recursive=True):
            try:
                with proc.oneshot():
                    wchan = Path(f"/proc/{proc.pid}/wchan").read_text().strip() or "-"
                    lines.append(f"    {proc.pid} {proc.ppid()} {proc.status()} {wchan} "
                                 f"{time.time() - proc.create_time():.0f}s {' '.join(proc.cmdline())[:160]}")
            except (psutil.Error, OSError):
                continue
        stacks = sorted(self.stacks_dir.glob("stacks-*.txt"))
        sizes = {path: path.stat().st_size for path in stacks}
        for worker in workers:  # the xdist workers: each dumps its threads' stacks on SIGUSR1
            try:
                worker.send_signal(signal.SIGUSR1)
            except psutil.Error:
                pass
        if workers:
            time.sleep(STACKS_WAIT_S)  # (a stopped worker dumps nothing until it is continued)
        for path in stacks:
            with open(path, errors="replace") as f:
                f.seek(sizes[path])
                text = f.read()
            lines.append(f"  Python stacks of {path.stem}:\n{text[-12000:] if text.strip() else '    (none)'}")
        return "\n".join(lines)


_watch: StallWatch | None = None


@pytest.hookimpl(trylast=True)  # after the tmp_path plugin's
def pytest_configure(config) -> None:
    global _watch
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # a worker: its stacks on SIGUSR1, appended to a file beside its basetemp that the controller reads
        stacks = open(config._tmp_path_factory.getbasetemp().parent / f"stacks-{worker}.txt", "a")  # noqa: SIM115
        config.stash[STACKS_FILE] = stacks  # open for the whole session
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    elif getattr(config.option, "numprocesses", None):  # the xdist controller: the workers' basetemps are in its own
        _watch = StallWatch(config._tmp_path_factory.getbasetemp())
        threading.Thread(target=_watch.watch, name="stall-watch", daemon=True).start()


def pytest_runtest_logstart(nodeid, location) -> None:
    if _watch is not None:
        _watch.started(nodeid)


def pytest_runtest_logreport(report) -> None:
    if _watch is not None and report.when == "teardown":
        _watch.ended(report.nodeid)
