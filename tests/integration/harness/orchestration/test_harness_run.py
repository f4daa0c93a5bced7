"""End-to-end harness runs on loopback with real processes: Locust master + workers, proxies, chronyd."""
from __future__ import annotations

import os
import threading
import time

import httpx
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tailrace.analysis.read.rundir import load_run
from tailrace.contract.master_events import WORKER_LEFT, read_master_events
from tailrace.contract.records import STATUSES
from tailrace.harness.services.processes import free_port
from tests.support import IN_CI, assert_valid, chronyd_path, make_profile, run_with, sleep_until_measuring, start_chronyd

RATE, DURATION, WARMUP, SKEW_MS = 150.0, 10.0, 1.0, 80.0


@pytest.fixture(scope="module")
def chronyd(tmp_path_factory):
    if chronyd_path() is None:
        if IN_CI:
            pytest.fail("chronyd must be installed in CI (.ci/run installs Debian's chrony)")
        pytest.skip("chronyd not installed")
    port = free_port()
    proc = start_chronyd(port, tmp_path_factory.mktemp("chronyd"))
    yield f"127.0.0.1:{port}"
    proc.stop()


@pytest.fixture(scope="module")
def main_run(model_repo, chronyd, tmp_path_factory):
    """2 regions (one worker skewed +80 ms), HTTP + gRPC, chronyd as the reference."""
    profile = make_profile(model_repo, clock__servers=[chronyd],
                           regions=[{"name": "near", "share": 0.5, "delay_ms": 2},
                                    {"name": "far", "share": 0.5, "delay_ms": 10, "jitter_ms": 1,
                                     "clock_skew_ms": SKEW_MS}],
                           load={"rate": RATE, "duration_s": DURATION, "warmup_s": WARMUP, "seed": 42})
    run, manifest = run_with(profile, tmp_path_factory.mktemp("runs"))
    return run, manifest, load_run(run.run_dir)


@pytest.fixture(scope="module")
def stall_run(model_repo, tmp_path_factory):
    """A 1 s endpoint stall mid-run, and a closed-loop client measuring the same endpoint side by side."""
    profile = make_profile(model_repo, embedded__fault_injection=True,
                           load={"rate": RATE, "duration_s": DURATION, "warmup_s": WARMUP, "seed": 43})
    closed_loop: list[float] = []

    def during(run):
        base = next(e.stats_url for e in run.plan.profile.endpoints if e.name == "mlp-http")
        body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": [0.0] * 64}]}
        stop_at = time.time() + 3 + 6 + WARMUP + DURATION

        def closed_loop_client():  # what a closed-loop tool would see: one request at a time
            with httpx.Client() as client:
                while time.time() < stop_at:
                    t0 = time.perf_counter()
                    try:
                        client.post(f"{base}/v2/models/digits_mlp_fp32/infer", json=body, timeout=10)
                    except httpx.TransportError:  # the run is over and its endpoint gone: so is this client
                        return
                    closed_loop.append(time.perf_counter() - t0)
                    time.sleep(0.005)

        t = threading.Thread(target=closed_loop_client, daemon=True)
        t.start()
        sleep_until_measuring(run, 4.0)
        r = httpx.post(f"{base}/v2/debug/stall", json={"seconds": 1.0})
        assert r.status_code == 200
        t.join()

    run, manifest = run_with(profile, tmp_path_factory.mktemp("runs"), during)
    return run, manifest, load_run(run.run_dir), closed_loop


def test_run_dir_and_row_count(main_run):
    run, manifest, data = main_run
    assert run.layout.manifest.exists()
    assert not data.skipped
    df = data.requests
    expected = RATE * (DURATION + WARMUP)
    assert abs(len(df) - expected) / expected < 0.10, (len(df), expected)
    assert set(df["region"]) == {"near", "far"} and set(df["protocol"]) == {"kserve-http", "kserve-grpc"}
    assert set(df["status"]) <= set(STATUSES)
    assert (df["status"] == "ok").mean() > 0.99
    assert df.loc[df.status == "ok", "correct"].mean() > 0.95
    for name in ("near-w0", "far-w0"):
        w = manifest["workers"][name]
        assert w["joined_ns"] and w["done_ns"] and w["summary"]["rows_written"] > 0
    assert manifest["versions"]["locust"] and manifest["seed"] == 42 and manifest["host"]["cpus"]
    assert_valid(manifest)
    assert run.layout.stats_snapshot("mlp-http", "after").exists()


def test_trace_ids_unique_wellformed_and_echoed(main_run):
    df = main_run[2].requests
    assert df["trace_id"].is_unique
    assert df["trace_id"].str.fullmatch(r"[0-9a-f]{32}").all() and df["span_id"].str.fullmatch(r"[0-9a-f]{16}").all()
    ok = df[df.status == "ok"]
    assert (ok["echoed_trace_id"] == ok["trace_id"]).all()
    assert (ok["server_receive_ns"] > 0).all() and (ok["server_compute_ns"] > 0).all()


def test_intended_gaps_are_poisson_per_worker_and_merged(main_run):
    _, _, data = main_run
    df = data.requests
    per_worker_rate = RATE / 2
    merged = []
    for worker, g in df.groupby("worker"):
        t = np.sort(g["t_intended"].to_numpy())
        gaps = np.diff(t) / 1e9
        assert stats.kstest(gaps, "expon", args=(0, 1 / per_worker_rate)).pvalue > 0.01, worker
        merged.append(t + int(g["clock_offset_ns"].median()))  # onto reference time
    gaps = np.diff(np.sort(np.concatenate(merged))) / 1e9
    assert stats.kstest(gaps, "expon", args=(0, 1 / RATE)).pvalue > 0.01


def test_skewed_worker_detected_against_chronyd(main_run):
    clock = main_run[2].clock
    far = clock[clock.worker == "far-w0"]
    near = clock[clock.worker == "near-w0"]
    assert set(far["stage"]) >= {"before", "during", "after"}
    assert np.all(np.abs(far["offset_ns"] / 1e6 + SKEW_MS) < 2.0), far["offset_ns"].tolist()
    assert np.all(np.abs(near["offset_ns"] / 1e6) < 2.0)
    df = main_run[2].requests
    assert abs(df.loc[df.worker == "far-w0", "clock_offset_ns"].median() / 1e6 + SKEW_MS) < 2.0
    # clock samples are stamped on the same (worker) clock and epoch as the requests
    for worker in ("far-w0", "near-w0"):
        samples = clock.loc[clock.worker == worker, "local_ns"]
        sent = df.loc[df.worker == worker, "t_sent"]
        assert sent.min() - 30e9 < samples.median() < sent.max() + 30e9


def test_analysis_merges_skewed_regions_onto_one_timeline(main_run):
    from tailrace.analysis.analyze import analyze_run

    run, _, _ = main_run
    a = analyze_run(run.run_dir)
    starts = a.requests.groupby("worker")["t_intended_ref"].min()
    assert (starts.max() - starts.min()) < 0.2e9  # both regions start together on the reference clock
    # the server's own statistics (snapshots before/after) agree with the client's log, request for request
    [row] = a.summary.to_dict()["endpoint_statistics"]  # both endpoints reach one server and one model
    assert sorted(row["endpoints"]) == ["mlp-grpc", "mlp-http"] and row["kind"] == "embedded"
    assert row["model"] == "digits_mlp_fp32"
    assert row["success"] == row["client_ok"] == int((a.requests["status"] == "ok").sum())
    far = next(m for w, m in a.clock_models.items() if w == "far-w0")
    assert abs(far.intercept_ns / 1e6 + SKEW_MS) < 2.0 and abs(far.slope) < 1e-4


def test_phases_start_at_the_same_reference_instant(main_run):
    """First intended send of each worker mapped to reference time: same start instant across regions — the
    master's START, sent once both workers were READY, earlier than the plan's instant."""
    run, manifest, data = main_run
    df = data.requests
    starts = [g["t_intended"].min() + g["clock_offset_ns"].median() for _, g in df.groupby("worker")]
    # each worker's first arrival is within a few mean gaps of the common start (Poisson: ~1/75 s)
    assert max(starts) - min(starts) < 0.2e9
    events = read_master_events(run.layout)
    [planned] = [e["start_ref_ns"] for e in events if e["event"] == "plan_sent"]
    [start] = [e for e in events if e["event"] == "start_sent"]
    assert start["start_ref_ns"] < planned and start["earlier_s"] > 0.5 and manifest["start_ref_ns"] == start["start_ref_ns"]
    assert min(starts) >= start["start_ref_ns"] - 0.05e9  # the run began at START's instant, not the plan's
    assert min(starts) < planned - 0.5e9


def test_coordinated_omission_stall_visible_from_intended_time(stall_run):
    _, _, data, closed_loop = stall_run
    df = data.requests
    measured = df[(df.phase > 0) & (df.status == "ok")]
    p99_intended = np.percentile(measured["latency_ns"], 99) / 1e6
    assert p99_intended > 400, p99_intended  # the 1 s stall dominates the tail when measured honestly
    # during the stall requests were still sent on time (open loop): the generator did not coordinate
    stalled = measured[measured.latency_ns > 300e6]
    assert len(stalled) > 0.02 * len(measured) and stalled["send_lag_ns"].max() < 50e6
    # a closed-loop client on the same endpoint in the same run saw the stall in one request only
    assert len(closed_loop) > 300
    assert np.percentile(closed_loop, 99) * 1000 < 100 and max(closed_loop) > 0.5


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_worker_killed_mid_run(model_repo, tmp_path):
    # the master marks a silent worker lost after generator.master_timeout_s: 10 s here (30 s by default)
    profile = make_profile(model_repo, load={"rate": 100, "duration_s": 8, "warmup_s": 0, "seed": 3},
                           generator={"master_timeout_s": 10})

    killed_at = {}

    def during(run):
        sleep_until_measuring(run, 3.0)
        killed_at["ns"] = time.time_ns()
        run.workers["far-w0"].kill()

    run, manifest = run_with(profile, tmp_path, during)
    far_dir = run.layout.worker("far", "far-w0").dir
    chunks = sorted(far_dir.glob("requests-*.parquet"))
    assert chunks, "the killed worker's closed chunks must survive"
    import pyarrow.parquet as pq

    saved = pd.concat([pq.read_table(c).to_pandas() for c in chunks])  # every closed chunk is readable
    # at most the open chunk is lost: closed chunks reach within chunk_seconds (+ flush poll) of the kill
    assert saved["t_done"].max() >= killed_at["ns"] - 1.6e9
    assert len(saved) < 100 * 0.5 * 8
    data = load_run(run.run_dir)
    assert not data.skipped
    near = data.requests[data.requests.worker == "near-w0"]
    assert abs(len(near) - 100 * 0.5 * 8) / (100 * 0.5 * 8) < 0.15  # the other worker finished its schedule
    far = manifest["workers"]["far-w0"]
    assert far["done_ns"] is None
    assert not manifest["valid"] and any("far-w0" in r for r in manifest["invalid_reasons"])
    # the others done and far-w0 marked gone: the run ends then, not at its time limit (lead + run + grace)
    [left] = [e for e in read_master_events(run.layout) if WORKER_LEFT.matches(e) and e["worker"] == "far-w0"]
    assert manifest["end_ns"] - left["t_ns"] < 4e9, (manifest["end_ns"], left)


# Loaded by every Python process of the run through PYTHONPATH: the worker's HTTP send path blocks its event loop
# for 2 ms a request (the real, unpatched sleep), so one worker can send at most 500 requests/s on any machine.
SLOW_SEND_PATH = """
import importlib.abc, importlib.util, sys, time
_block = time.sleep  # captured before gevent patches time
_MODULE = "tailrace.harness.client.senders"

class _SlowSends(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            encode = module.HttpSender.encode  # every request's, on either send path (inline or greenlet)

            def slow_encode(self, *args, **kwargs):
                _block(0.002)
                return encode(self, *args, **kwargs)

            module.HttpSender.encode = slow_encode

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _SlowSends())
"""


def test_a_generator_that_cannot_keep_up_makes_the_run_invalid(model_repo, tmp_path, monkeypatch):
    """A worker whose send path costs 2 ms of its event loop a request (at most 500/s) asked for 800/s: it ends
    window after window behind schedule, and the run is INVALID with the reason (never a number for a load that
    was not offered). The overload is built into the worker, so it holds on a machine of any speed."""
    hook = tmp_path / "slow_send_path"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_SEND_PATH)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
    profile = make_profile(model_repo,
                           endpoints=[{"name": "logreg", "url": "embedded", "protocol": "kserve-http",
                                       "model": "digits_logreg_fp32"}],
                           regions=[{"name": "solo", "share": 1.0}],
                           load={"rate": 800, "duration_s": 2.5, "warmup_s": 0.5, "seed": 5},
                           generator={"window_s": 0.5, "max_in_flight": 100_000})
    run, manifest = run_with(profile, tmp_path / "run")
    assert not manifest["valid"]
    assert any(r.startswith("solo-w0: ") and "generator saturated" in r
               for r in manifest["invalid_reasons"]), manifest["invalid_reasons"]
    summary = manifest["workers"]["solo-w0"]["summary"]
    # 2,400 sends at ≥ 2 ms each take ≥ 4.8 s for a 3 s schedule: the last go out ≥ 1.8 s late (the slowed path
    # took effect; an unslowed worker on a fast machine would not lag at all)
    assert len(summary["lagging_windows"]) >= 2 and summary["max_send_lag_p99_ms"] > 1000, summary
