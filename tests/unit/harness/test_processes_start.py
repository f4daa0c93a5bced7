"""A start cut short by a Ctrl-C (KeyboardInterrupt) leaves no child running: neither while Popen waits to hear that
the exec succeeded (the Popen is never returned: nothing else could stop the child — seen in CI, an embedded server
left running after `tailrace run` ended on a Ctrl-C) nor once Popen has returned and the start is finishing."""
from __future__ import annotations

import os
import secrets
import sys

import psutil
import pytest

from tailrace.harness.services import processes
from tailrace.harness.services.processes import start_process


def _running(marker: str) -> list[int]:
    """PIDs of live (not zombie) processes whose command line holds `marker`."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(p.info["cmdline"] or []):
            found.append(p.pid)
    return found


def test_a_ctrl_c_while_popen_waits_for_the_exec_kills_the_child(tmp_path, monkeypatch):
    marker = f"cut-short-{secrets.token_hex(4)}"
    real_read, cut = os.read, []

    def read(fd, n):  # the errpipe's read, after the fork: where a Ctrl-C lands while the child execs
        if not cut:
            cut.append(fd)
            raise KeyboardInterrupt
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", read)
    with pytest.raises(KeyboardInterrupt):
        start_process("sleeper", [sys.executable, "-c", f"import time; time.sleep(60)  # {marker}"], tmp_path / "a.log")
    monkeypatch.setattr(os, "read", real_read)
    assert cut and _running(marker) == []


def test_a_ctrl_c_once_popen_returned_kills_the_child(tmp_path, monkeypatch):
    marker = f"cut-short-{secrets.token_hex(4)}"

    class Interrupted:  # the ManagedProcess that would have held it
        def __init__(self, *args, **kwargs):
            raise KeyboardInterrupt

    monkeypatch.setattr(processes, "ManagedProcess", Interrupted)
    with pytest.raises(KeyboardInterrupt):
        start_process("sleeper", [sys.executable, "-c", f"import time; time.sleep(60)  # {marker}"], tmp_path / "b.log")
    assert _running(marker) == []


def test_a_failed_exec_is_still_the_same_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        start_process("nothing", [str(tmp_path / "no-such-program")], tmp_path / "c.log")
