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


def test_the_log_tail_holds_the_output_of_a_process_that_wrote_and_ended_before_its_start_returned(tmp_path,
                                                                                                    monkeypatch):
    """A child shares its log's file offset with this process: one that fails in its first milliseconds (PyTriton's
    handshake race, under a loaded CI machine) had moved it before the start read where its output begins, and its
    failure read as empty. Here the start returns only once the child has written and exited."""
    from tailrace.harness.services import processes

    class EndedBeforeReturning(processes._StoppedIfCutShort):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.wait(30)

    log = tmp_path / "triton.log"
    log.write_text("an earlier start's line\n")
    monkeypatch.setattr(processes, "_StoppedIfCutShort", EndedBeforeReturning)
    failed = start_process("failed", [sys.executable, "-c", "print('get_config_from_handshake_server')"], log)
    failed.stop()
    assert failed.log_tail() == "get_config_from_handshake_server"
