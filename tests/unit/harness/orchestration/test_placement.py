"""Where a local run's processes go: with `generator.cpus`, the Locust master runs off the workers' cores when the
machine has others, beside them when it has none, and wherever the kernel puts it when nothing is pinned."""
from __future__ import annotations

from tailrace.harness.orchestration import local_run


def test_the_master_keeps_off_the_workers_cores_when_there_are_others(monkeypatch):
    monkeypatch.setattr(local_run.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert local_run.master_cpus([0, 1]) == [2, 3]
    assert local_run.master_cpus([0, 1, 2, 3]) == [0, 1, 2, 3]  # no other core: beside the workers
    assert local_run.master_cpus(None) is None and local_run.master_cpus([]) is None
