"""Scenario semantics on real runs (Locust master + workers, delay proxies, the embedded endpoint):
single-stream, multi-stream, offline, and phased server load (steps, ramps, spikes) aligned across regions."""
from __future__ import annotations

import numpy as np
import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.report.html import render
from tailrace.harness.worker.arrivals import rate_segments
from tests.support import assert_valid, make_profile, run_with

ENDPOINTS = [
    {"name": "mlp-http", "url": "embedded", "protocol": "kserve-http", "model": "digits_mlp_fp32", "timeout_ms": 2000},
    {"name": "mlp-grpc", "url": "embedded", "protocol": "kserve-grpc", "model": "digits_mlp_fp32", "timeout_ms": 2000},
]
REGIONS = [{"name": "near", "share": 0.5, "delay_ms": 2}, {"name": "far", "share": 0.5, "delay_ms": 15}]


def scenario_run(model_repo, tmp_path_factory, load: dict, regions=REGIONS, endpoints=ENDPOINTS):
    profile = make_profile(model_repo, endpoints=endpoints, regions=regions, load=load)
    run, manifest = run_with(profile, tmp_path_factory.mktemp("scenario"))
    return run, manifest, analyze_run(run.run_dir)


@pytest.fixture(scope="module")
def single_stream(model_repo, tmp_path_factory):
    return scenario_run(model_repo, tmp_path_factory,
                        {"scenario": "single-stream", "duration_s": 5, "warmup_s": 1, "seed": 3})


def test_single_stream_never_has_two_requests_in_flight_per_region(single_stream):
    _, manifest, a = single_stream
    df = a.requests
    assert_valid(manifest)
    for region, g in df.groupby("region"):
        g = g.sort_values("t_sent")
        # on the worker's own clock: each request is sent no earlier than the previous one completed
        assert (g["t_sent"].to_numpy()[1:] >= g["t_done"].to_numpy()[:-1]).all(), region
        assert (g["in_flight"] == 1).all()
    assert a.summary.to_dict()["scenario"]["max_in_flight_per_region"] == {"near": 1, "far": 1}
    # a closed loop: the far region (RTT ≥ 30 ms) completes far fewer queries than the near one
    counts = df[df.phase > 0].groupby("region").size()
    assert counts["near"] > 2 * counts["far"] and counts["far"] <= 5 / 0.030 + 5


def test_single_stream_reports_p90_with_ci(single_stream):
    _, _, a = single_stream
    rows = {(r["endpoint"], r["region"]): r for r in a.summary.to_dict()["scenario"]["p90"]}
    far = rows[("mlp-http", "far")]
    assert far["p90_ms"] is not None and far["ci_low"] <= far["p90_ms"] <= far["ci_high"]
    assert far["p90_ms"] > 30  # two 15 ms one-way legs
    assert "Scenario: single-stream" in render(a)


@pytest.fixture(scope="module")
def multi_stream(model_repo, tmp_path_factory):
    # near: RTT ~4 ms fits the 25 ms interval; far: RTT ≥ 60 ms (30 ms each way) does not
    regions = [{"name": "near", "share": 0.5, "delay_ms": 2}, {"name": "far", "share": 0.5, "delay_ms": 30}]
    return scenario_run(model_repo, tmp_path_factory,
                        {"scenario": "multi-stream", "duration_s": 5, "warmup_s": 1, "seed": 4,
                         "samples_per_query": 8, "interval_ms": 25}, regions=regions, endpoints=ENDPOINTS[:1])


def test_multi_stream_queries_and_missed_intervals(multi_stream):
    _, manifest, a = multi_stream
    df = a.requests
    assert_valid(manifest)
    assert (df["batch_size"] == 8).all()
    ok = df[df.status == "ok"]
    assert ok["correct_count"].sum() / ok["batch_size"].sum() > 0.95  # every sample of each query checked
    intervals = a.summary.to_dict()["scenario"]["intervals"]
    for region in ("near", "far"):
        assert abs(intervals[region]["intervals"] - 5 / 0.025) <= 2
    assert intervals["near"]["missed_fraction"] < 0.1
    assert intervals["far"]["missed_fraction"] > 0.5  # a query takes > 2 intervals: most ticks find it in flight
    measured = df[df.phase > 0]
    sent = measured.groupby("region").size()
    for region in ("near", "far"):  # every interval either sent a query or was counted as missed
        assert abs(sent[region] + intervals[region]["missed"] - intervals[region]["intervals"]) <= 1
    # queries start on the interval grid: intended times are multiples of 25 ms from the first
    near = np.sort(df[df.region == "near"]["t_intended"].to_numpy())
    steps = (near - near[0]) / 25e6
    assert np.allclose(steps, np.round(steps), atol=1e-3)
    rows = {r["region"]: r for r in a.summary.to_dict()["scenario"]["p99"]}
    assert rows["far"]["p99_ms"] is None or rows["far"]["p99_ms"] > 60


@pytest.fixture(scope="module")
def offline(model_repo, tmp_path_factory):
    return scenario_run(model_repo, tmp_path_factory,
                        {"scenario": "offline", "duration_s": 4, "warmup_s": 1, "seed": 5, "offline_batch": 128,
                         "offline_concurrency": 2},
                        regions=[{"name": "near", "share": 1.0}], endpoints=ENDPOINTS[:1])


def test_offline_sends_large_batches_and_reports_samples_per_second(offline):
    _, manifest, a = offline
    df = a.requests
    assert_valid(manifest)
    assert (df["batch_size"] == 128).all() and (df["status"] == "ok").all()
    assert (df["sample_index"] % 128 == 0).all()
    assert df["in_flight"].max() == 2  # offline_concurrency batches in flight, no more
    sc = a.summary.to_dict()["scenario"]
    measured = df[df.phase > 0]
    assert sc["samples_per_s"] == pytest.approx(measured["batch_size"].sum() / 4)
    assert sc["samples_per_s"] > 1000
    assert sc["accuracy"] > 0.95


@pytest.fixture(scope="module")
def phased(model_repo, tmp_path_factory):
    """Server scenario with a step, a ramp and a spike; the far region's clock runs 60 ms fast."""
    regions = [{"name": "near", "share": 0.5, "delay_ms": 2},
               {"name": "far", "share": 0.5, "delay_ms": 10, "clock_skew_ms": 60}]
    load = {"rate": 80, "duration_s": 12, "warmup_s": 1, "seed": 8,
            "phases": [{"at_s": 0, "rate": 80}, {"at_s": 3, "kind": "ramp", "rate": 160, "duration_s": 3},
                       {"at_s": 7, "kind": "spike", "factor": 3, "duration_s": 2}]}
    return scenario_run(model_repo, tmp_path_factory, load, regions=regions)


def test_phase_boundaries_aligned_across_regions(phased):
    run, manifest, a = phased
    segments = rate_segments(80, run.profile.load.phases, 1, 12)
    assert [p["name"] for p in a.summary.to_dict()["phases"]] == [s.name for s in segments]
    start_ref = manifest["start_ref_ns"]
    df = a.requests
    for region, g in df.groupby("region"):
        unc = max(1e6, float(g["clock_uncertainty_ns"].max())) + 1e6  # clock uncertainty + 1 ms
        for k, seg in enumerate(segments[1:], start=1):
            boundary = start_ref + seg.start_s * 1e9
            before, after = g[g.phase == k - 1]["t_intended_ref"], g[g.phase == k]["t_intended_ref"]
            assert before.max() < boundary + unc, (region, seg.name, (before.max() - boundary) / 1e6)
            assert after.min() > boundary - unc, (region, seg.name, (boundary - after.min()) / 1e6)


def test_phase_rates_and_per_phase_statistics(phased):
    _, _, a = phased
    rows = {r["name"]: r for r in a.summary.to_dict()["phases"]}
    spike = rows["spike ×3 (480/s)"]
    steady = rows["160/s"]
    assert spike["intended_rate"] == pytest.approx(480)
    for r in (spike, steady, rows["80/s"]):
        assert abs(r["achieved_rate"] - r["intended_rate"]) < 4 * np.sqrt(r["intended_rate"] / (r["end_s"] -
                                                                                                r["start_s"]))
    assert spike["p50_ms"] is not None and spike["p50_ci"][0] <= spike["p50_ms"] <= spike["p50_ci"][1]
    page = render(a)
    assert "ramp 80→160/s" in page and "after spike 160/s" in page


def test_cold_start_of_the_endpoint_the_run_started(single_stream):
    run, _, a = single_stream
    rows = {r["endpoint"]: r for r in a.summary.to_dict()["cold_start"]}
    assert set(rows) == {"mlp-http", "mlp-grpc"}
    for r in rows.values():
        assert r["server"] == "embedded"
        assert 0 < r["ready_s"] <= r["first_success_s"] < 60
        assert r["first_k"] == 20 and r["first_k_mean_ms"] > 0 and r["steady_mean_ms"] > 0
    assert run.layout.cold_start("mlp-http").exists()
    assert "id='cold-start'" in render(a)
