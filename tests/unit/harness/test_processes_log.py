"""A started process's log tail is its own output, never an earlier process's appended to the same log (a restart on
the same port read an old failure as its own: the Triton handshake test's rare misclassification)."""
from __future__ import annotations

import sys

from tailrace.harness.services.processes import start_process


def test_the_log_tail_holds_only_this_processes_output(tmp_path):
    log = tmp_path / "server.log"
    first = start_process("first", [sys.executable, "-c", "print('get_config_from_handshake_server failed')"], log)
    first.popen.wait(30)
    first.stop()
    second = start_process("second", [sys.executable, "-c", "print('some other failure')"], log)
    second.popen.wait(30)
    second.stop()
    assert "handshake" in log.read_text() and second.log_tail() == "some other failure"
    assert first.log_tail(5).startswith("get_config_from_handshake_server")
