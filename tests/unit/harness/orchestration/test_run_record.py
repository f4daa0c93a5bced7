"""The run record's verdict on how a run went: planned vs sent."""
from __future__ import annotations

from tailrace.harness.orchestration.run_record import shortfalls


def test_a_worker_that_sent_less_than_planned_is_named_with_the_numbers():
    summaries = {"eu-w0": {"planned": 1564, "sent": 339}, "us-w0": {"planned": 1623, "sent": 1623},
                 "ap-w0": {"planned": 10_000, "sent": 9_995}}  # within the 0.1% tolerance
    assert shortfalls(summaries) == ["eu-w0: sent 339 of 1,564 planned requests (21.7%)"]


def test_a_one_request_difference_is_tolerated_at_any_size():
    assert shortfalls({"w": {"planned": 10, "sent": 9}}) == []
    assert shortfalls({"w": {"planned": 10, "sent": 8}}) == ["w: sent 8 of 10 planned requests (80.0%)"]


def test_the_disk_reserve_comes_from_the_environment_or_says_what_is_wrong(monkeypatch, tmp_path):
    """TAILRACE_MIN_FREE_MB sets the free space a run directory's disk keeps; a malformed value is one error
    naming the variable; a reserve above the disk's free space is a reason to stop, naming the directory."""
    import pytest

    from tailrace.harness.orchestration.disk_space import MIN_FREE_BYTES, low_disk_reason, min_free_bytes

    monkeypatch.delenv("TAILRACE_MIN_FREE_MB", raising=False)
    assert min_free_bytes() == MIN_FREE_BYTES == 16 * 2**20
    monkeypatch.setenv("TAILRACE_MIN_FREE_MB", "0.5")
    assert min_free_bytes() == 2**19
    for bad in ("lots", "-1"):
        monkeypatch.setenv("TAILRACE_MIN_FREE_MB", bad)
        with pytest.raises(ValueError, match=f"TAILRACE_MIN_FREE_MB='{bad}': expected a number of MiB"):
            min_free_bytes()
    assert low_disk_reason(tmp_path, 0) is None
    reason = low_disk_reason(tmp_path, 2**62)
    assert reason.startswith(f"the disk holding {tmp_path} has ") and "MiB free" in reason


def test_a_worker_that_began_at_another_instant_makes_the_run_invalid():
    from tailrace.harness.orchestration.run_record import off_start

    start = 1_000_000_000_000
    summaries = {"eu-w0": {"start_ref_ns": start}, "us-w0": {"start_ref_ns": start + 4_200_000_000},
                 "old-w0": {}}  # a summary from before workers recorded it
    [reason] = off_start(summaries, start)
    assert reason.startswith("us-w0: started +4.2 s from the run's start instant") and "START" in reason
    assert off_start(summaries, None) == []
