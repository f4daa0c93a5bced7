"""The master's live board: the workers' digests added up per region × endpoint and second (a late burst after a
gap lands in its own seconds), the run's phases, gaps per worker, provisional SLO verdicts, the LIVE lines."""
from __future__ import annotations

import json

import numpy as np

from tailrace.contract.layout import RunLayout
from tailrace.contract.plan import unresolved_plan
from tailrace.contract.profile import parse_profile
from tailrace.harness.control.live_board import LiveBoard, Tally, provisional_verdict
from tailrace.harness.worker.live_report import histogram, wire_histogram

PROFILE = {"name": "b", "endpoints": [{"name": "a", "url": "embedded", "protocol": "kserve-http", "model": "m"}],
           "regions": [{"name": "eu", "share": 0.5}, {"name": "us", "share": 0.5}],
           "load": {"rate": 100, "duration_s": 10, "warmup_s": 1,
                    "phases": [{"at_s": 4, "kind": "spike", "factor": 3, "duration_s": 2}]},
           "slos": [{"metric": "latency", "percentile": 99, "threshold_ms": 50},
                    {"metric": "error_rate", "threshold": 0.01}]}


def digest(t_s: float, n: int, latency_ms: float, errors: int = 0, cancelled: int = 0) -> dict:
    lat = np.full(n - errors - cancelled, latency_ms * 1e6)
    return {"t_s": t_s, "interval_s": 1.0, "sent": n, "in_flight": 0, "clock_offset_ns": 2_000_000,
            "clock_uncertainty_ns": 100_000, "window": None, "lagging_windows": 0, "behind": False,
            "sessions_in_flight": None,
            "endpoints": {"a": {"asked": n, "done": n, "ok": n - errors - cancelled, "cancelled": cancelled,
                                "errors": {"timeout": errors} if errors else {},
                                "latency": wire_histogram(histogram(lat)),
                                "send_lag": wire_histogram(histogram(np.full(n, 1e5)))}}}


def board(tmp_path, quiet=None) -> LiveBoard:
    plan = unresolved_plan(parse_profile(PROFILE, "p"), "run-1", str(tmp_path), lead_s=6)
    b = LiveBoard(plan, RunLayout(tmp_path), lambda: quiet or {"eu-w0": 0.0, "us-w0": 0.0})
    b.started(1_000, 0)
    return b


def test_digests_add_up_per_region_endpoint_and_second_and_lines_are_written(tmp_path):
    b = board(tmp_path)
    b.add("eu-w0", "eu", digest(1.0, 50, 10))
    b.add("us-w0", "us", digest(1.0, 50, 30))
    b.add("eu-w0", "eu", digest(2.0, 60, 12, errors=3))
    line = b.tick()
    points = {(p["t_s"], p["region"]): p for p in line["points"]}
    assert points[(1, "eu")]["done_per_s"] == 50 and points[(2, "eu")]["errors_per_s"] == 3
    assert abs(points[(1, "us")]["latency_p99_ms"] - 30) < 0.3
    totals = {t["region"]: t for t in line["totals"]}
    assert totals["eu"]["done"] == 110 and totals["eu"]["errors"] == {"timeout": 3}

    assert b.tick()["points"] == []  # only seconds that changed are sent again
    b.add("us-w0", "us", digest(2.0, 55, 31))  # late (a gap): its second is sent again, whole
    assert [(p["t_s"], p["region"]) for p in b.tick()["points"]] == [(2, "eu"), (2, "us")]
    lines = [json.loads(x) for x in RunLayout(tmp_path).live.read_text().splitlines()]
    assert [x["event"] for x in lines] == ["live_started", "live", "live", "live"]
    assert [p["name"] for p in lines[0]["phases"]][-2:] == ["spike ×3 (300/s)", "after spike 100/s"]


def test_a_gap_is_kept_per_worker_with_its_length(tmp_path):
    b = board(tmp_path, quiet={"eu-w0": 0.0, "us-w0": 5.0})
    b.gap_began("us-w0", 3.2)
    workers = {w["worker"]: w for w in b.tick()["workers"]}
    assert workers["us-w0"]["gaps"] == [[3.2, None]] and workers["us-w0"]["heartbeat_age_s"] == 5.0
    b.gap_ended("us-w0", 4.5)
    assert {w["worker"]: w for w in b.tick()["workers"]}["us-w0"]["gaps"] == [[3.2, 4.5]]


def test_slo_verdicts_are_provisional_and_wait_for_enough_of_the_tail(tmp_path):
    b = board(tmp_path)
    b.add("eu-w0", "eu", digest(0.5, 100, 10))  # warm-up: not judged
    b.add("eu-w0", "eu", digest(2.0, 100, 10))
    verdicts = {(v["metric"], v["region"]): v for v in b.slo_verdicts()}
    assert verdicts[("latency", "eu")]["verdict"] == "WAIT"  # 100 samples: 1 above a p99
    for t in range(3, 8):
        b.add("eu-w0", "eu", digest(float(t), 100, 60, errors=2))
    verdicts = {(v["metric"], v["region"]): v for v in b.slo_verdicts()}
    assert verdicts[("latency", "eu")]["verdict"] == "FAIL" and verdicts[("latency", "eu")]["n"] == 590
    assert verdicts[("error_rate", "eu")]["verdict"] == "FAIL"
    tally = Tally()
    tally.add(digest(1.0, 1000, 10)["endpoints"]["a"])
    assert provisional_verdict("latency", 99, 50, None, tally)["verdict"] == "PASS"


def test_an_every_endpoint_latency_slo_leaves_streamed_endpoints_to_their_own_goals(tmp_path):
    profile = {**PROFILE, "endpoints": [*PROFILE["endpoints"], {"name": "llm", "url": "embedded",
                                                                "protocol": "openai-chat", "model": "synthetic_lm"}]}
    plan = unresolved_plan(parse_profile(profile, "p"), "run-2", str(tmp_path), lead_s=6)
    b = LiveBoard(plan, RunLayout(tmp_path), dict)
    b.started(1_000, 0)
    d = digest(2.0, 100, 10)
    d["endpoints"]["llm"] = {**d["endpoints"]["a"]}
    b.add("eu-w0", "eu", d)
    assert {(v["metric"], v["endpoint"]) for v in b.slo_verdicts()} == {
        ("latency", "a"), ("error_rate", "a"), ("error_rate", "llm")}


def test_cancelled_streams_are_no_errors_on_the_live_board(tmp_path):
    b = board(tmp_path)
    b.add("eu-w0", "eu", digest(1.0, 50, 10, errors=2, cancelled=5))
    line = b.tick()
    point = next(p for p in line["points"] if p["region"] == "eu")
    total = next(t for t in line["totals"] if t["region"] == "eu")
    assert point["errors_per_s"] == 2 and total["cancelled"] == 5 and total["errors"] == {"timeout": 2}
