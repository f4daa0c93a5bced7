"""A stop ends a process that ignores SIGTERM, and never raises: one SIGKILLed that is slow to go (CI: PyTriton's
launcher beside a vLLM start, over 5 s) is waited for longer, and one still there after is said in a line."""
from __future__ import annotations

import subprocess
import sys
import time

from tailrace.harness.services import processes
from tailrace.harness.services.processes import start_process

IGNORES_SIGTERM = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\n"
                   "time.sleep(60)")


def _started(tmp_path) -> processes.ManagedProcess:
    log = tmp_path / "stubborn.log"
    proc = start_process("stubborn", [sys.executable, "-c", IGNORES_SIGTERM], log)
    deadline = time.monotonic() + 30
    while "up" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def test_a_process_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path):
    proc = _started(tmp_path)
    assert proc.stop(timeout=0.5) == -9 and not proc.alive()


def test_a_killed_process_slow_to_go_is_waited_for_and_a_stop_never_raises(tmp_path, monkeypatch, capsys):
    proc = _started(tmp_path)
    waits: list[float | None] = []

    def never_gone(timeout=None):
        waits.append(timeout)
        raise subprocess.TimeoutExpired("stubborn", timeout)

    monkeypatch.setattr(proc.popen, "wait", never_gone)
    monkeypatch.setattr(processes, "KILLED_WAIT_S", 0.1)
    try:
        assert proc.stop(timeout=0.2) is None  # SIGTERM's wait, then SIGKILL's: neither raised
        assert waits == [0.2, 0.1]
        assert capsys.readouterr().err.strip() == f"tailrace: stubborn (PID {proc.pid}) still not gone 0.1 s after SIGKILL"
    finally:
        monkeypatch.undo()
        proc.popen.wait(30)  # SIGKILLed above: gone for real
