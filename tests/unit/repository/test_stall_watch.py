"""tests/stall_watch.py: what a hung test run prints."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from tests.stall_watch import StallWatch

DUMPS_ON_SIGUSR1 = ("import faulthandler, signal, sys, time\n"
                    "faulthandler.register(signal.SIGUSR1, file=open(sys.argv[1], 'a'), all_threads=True)\n"
                    "print('ready', flush=True)\n"
                    "time.sleep(30)\n")


def test_a_stall_names_the_running_test_a_stopped_process_and_the_workers_stacks(tmp_path):
    watch = StallWatch(tmp_path)
    watch.started("tests/x.py::test_a")
    watch.started("tests/x.py::test_b")
    watch.ended("tests/x.py::test_b")
    stacks = tmp_path / "stacks-gw0.txt"
    stacks.write_text("an earlier dump\n")
    stopped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    worker = subprocess.Popen([sys.executable, "-c", DUMPS_ON_SIGUSR1, str(stacks)], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline() == "ready\n"
        os.kill(stopped.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while psutil.Process(stopped.pid).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.01)
        text = watch.describe(612, dict(watch.running), [psutil.Process(worker.pid)])
    finally:
        for proc in (stopped, worker):
            proc.kill()
            proc.wait()
    assert "no test has started or ended for 612 s" in text
    assert "running: tests/x.py::test_a" in text and "test_b" not in text
    (line,) = [row for row in text.splitlines() if row.split()[:1] == [str(stopped.pid)]]
    assert " stopped " in line and "time.sleep(30)" in line
    dump = text.split("Python stacks of stacks-gw0:")[1]
    assert "<module>" in dump and "an earlier dump" not in dump  # only what it dumped for this stall
