"""A run's stop stops every process it started, newest first, even when one of them fails to stop (CI: a Triton
that could not be stopped had left the run's SNTP reference running for good)."""
from __future__ import annotations

import pytest

from tailrace.harness.orchestration.local_run import LocalRun


class _Process:
    def __init__(self, name: str, stopped: list[str], fails: bool = False) -> None:
        self.name, self.stopped, self.fails = name, stopped, fails

    def stop(self, timeout: float = 10.0) -> int:
        self.stopped.append(self.name)
        if self.fails:
            raise RuntimeError(f"{self.name} would not stop")
        return 0


def test_one_process_that_fails_to_stop_leaves_none_of_the_others_running(tmp_path):
    stopped: list[str] = []
    run = LocalRun(profile=None, out=tmp_path)  # type: ignore[arg-type] — stop() reads no profile
    run.processes = [_Process(name, stopped, fails=name == "endpoint") for name in ("sntp", "endpoint", "master")]
    with pytest.raises(RuntimeError, match="endpoint would not stop"):
        run.stop()
    assert stopped == ["master", "endpoint", "sntp"]
