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


def test_a_worker_that_could_not_run_the_plan_is_named_with_its_error_and_one_that_left_no_summary_too(tmp_path):
    """A worker's ERROR (sent instead of HELLO: it could not run the plan) is the manifest's reason for it, by the
    name it was admitted as; a worker that left no summary and sent no error is said so."""
    import json

    from tailrace.contract.layout import RunLayout
    from tailrace.contract.master_events import WORKER_ADMITTED, WORKER_ERROR, MasterEventLog
    from tailrace.contract.plan import unresolved_plan
    from tailrace.contract.profile import parse_profile
    from tailrace.harness.orchestration.run_record import RunRecord, worker_errors

    profile = parse_profile({"name": "c", "endpoints": [{"name": "a", "url": "embedded", "protocol": "kserve-http",
                                                         "model": "m"}],
                             "regions": [{"name": "r", "share": 1.0, "workers": 3}],
                             "load": {"rate": 10, "duration_s": 5}}, "p")
    layout = RunLayout(tmp_path)
    log = MasterEventLog(layout)
    for i in range(3):
        log.write(WORKER_ADMITTED, client_id=f"c{i}", worker=f"r-w{i}", region="r")
    log.write(WORKER_ERROR, client_id="c1", error="[Errno 98] metrics port 127.0.0.1:9: Address already in use")
    log.write(WORKER_ERROR, client_id="stranger", error="never admitted: not a worker of this run")
    worker = layout.worker("r", "r-w0")
    worker.dir.mkdir(parents=True)
    worker.summary.write_text(json.dumps({"planned": 10, "sent": 10}))

    events = [json.loads(line) for line in layout.master_events.read_text().splitlines()]
    assert worker_errors(events) == {"r-w1": "[Errno 98] metrics port 127.0.0.1:9: Address already in use"}
    record = RunRecord(unresolved_plan(profile, "run-1", str(tmp_path), lead_s=1), layout, cpu_at_start=None)
    invalid = record.manifest(False, {"r-w0": 0, "r-w1": 0, "r-w2": -9})["invalid_reasons"]
    assert invalid == ["r-w1: could not run the plan: [Errno 98] metrics port 127.0.0.1:9: Address already in use "
                       "(worker exited with 0)",
                       "r-w2: no worker summary (worker exited with -9); its closed chunks are used"]
    unscraped = "a: the server's metrics before the run were not scraped (http://x/metrics: ReadTimeout after 10 s)"
    warnings = record.manifest(False, {"r-w0": 0}, warnings=[unscraped])["warnings"]
    assert warnings[0] == unscraped  # the orchestrator's own warnings, before the workers'
