"""Each arrival check declares the log's columns only where it runs: a Poisson run's arrival-process check and
another process's Poisson check return nothing, and must not read (a day's log: five 800 MB time columns) for it."""
from __future__ import annotations

import pytest

import tailrace.analysis.analyze as analyze
from tailrace.analysis.analyze import ARRIVAL_COLUMNS, analyze_run
from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS
from tests.support import profile_dict, write_run


@pytest.mark.parametrize("arrivals, reading, silent", [
    (None, "arrivals", "arrival_process"),  # Poisson, the default
    ({"process": "gamma", "cv": 2.0}, "arrival_process", "arrivals")])
def test_only_the_arrival_check_that_runs_reads_the_arrival_columns(tmp_path, monkeypatch, arrivals, reading, silent):
    profile = profile_dict(200, 3)
    if arrivals is not None:
        profile["load"]["arrivals"] = arrivals
    write_run(tmp_path, profile=profile, workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 100, "duration_s": 3},
        "r2-w0": {"region": "r2", "latency_ms": 5, "rate": 100, "duration_s": 3}})
    declared: dict[str, tuple[str, ...]] = {}
    run_statistics = analyze.run_statistics

    def recording(statistics, *args, **kwargs):
        declared.update({s.name: s.reads for s in statistics})
        return run_statistics(statistics, *args, **kwargs)

    monkeypatch.setattr(analyze, "run_statistics", recording)
    summary = analyze_run(tmp_path, ANALYSIS_COLUMNS).summary
    assert set(ARRIVAL_COLUMNS) <= set(declared[reading]) and declared[silent] == ()
    assert getattr(summary, reading) and not getattr(summary, silent)  # the check that runs has its rows
