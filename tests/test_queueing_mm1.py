"""The analysis checks itself against queueing theory on a real run of synthetic_mm1 (one slot, Exp service)."""
from __future__ import annotations

import pytest

from analysis.analyze import analyze_run
from tests.helpers import make_profile, run_with

MEAN_SERVICE_MS = 1.0  # μ = 1000/s: short relaxation times; 90 s at ρ≈0.8 pins the mean wait to about ±4% (sd)


def mm1_run(model_repo, out, rate: float, duration_s: float):
    profile = make_profile(
        model_repo,
        endpoints=[{"name": "mm1", "url": "embedded", "protocol": "kserve-http", "model": "synthetic_mm1"}],
        regions=[{"name": "local", "share": 1.0}],
        load={"rate": rate, "duration_s": duration_s, "warmup_s": 3, "seed": int(rate)},
        embedded={"models_dir": str(model_repo), "slots": {"synthetic_mm1": 1},
                  "queue_depth": {"synthetic_mm1": 4096}, "mm1_mean_ms": MEAN_SERVICE_MS},
        clock={"servers": ["embedded"], "interval_s": 10})
    run, manifest = run_with(profile, out)
    return manifest, analyze_run(run.run_dir).summary


# the slot's real service time runs ~5% over the nominal mean (hand-off overhead is execution time)
@pytest.mark.parametrize("rho,duration_s", [(0.5, 30), (0.8, 90)])
def test_littles_law_and_mm1_wait(model_repo, tmp_path, rho, duration_s):
    manifest, summary = mm1_run(model_repo, tmp_path, rho * 1000 / (MEAN_SERVICE_MS * 1.05), duration_s)
    # This test is about the queueing analysis. Generator and server share this 2-core machine, so a
    # window or two may exceed the saturation threshold (the run is then INVALID, as it must be); what
    # matters here is that arrivals stayed close to schedule over the run — far below the waits measured.
    assert all("send lag" in reason for reason in manifest["invalid_reasons"]), manifest["invalid_reasons"]
    overall = next(r for r in summary["latency"] if r["endpoint"] == "*" and r["region"] == "*")
    assert overall["send_lag_p99_ms"] < 5.0, overall["send_lag_p99_ms"]
    q = next(row for row in summary["queueing"] if row["model"] == "synthetic_mm1")
    assert abs(q["littles_gap"]) < 0.05, q
    assert abs(q["mean_service_ms"] - MEAN_SERVICE_MS) / MEAN_SERVICE_MS < 0.15, q
    assert abs(q["utilization"] - rho) < 0.1, q
    mm1 = q["mm1"]
    assert abs(mm1["mean_wait_rel_error"]) < 0.15, mm1
    assert q["utilization_flag"] == (q["utilization"] > 0.7)
