"""Capacity search: the pure search / trial logic, and a real search on synthetic_mm1 against M/M/1 theory."""
from __future__ import annotations

import json
import math

import pytest

from analysis.capacity_search import (
    FAIL,
    GENERATOR_LIMIT,
    PASS,
    UNDECIDED,
    SearchState,
    classify_trial,
    recommendation,
    retry_duration_s,
    trial_duration_s,
)
from contract.profile import parse_profile
from tailrace.capacity import CapacityError, run_capacity
from tests.support import split_cpus


def drive(state: SearchState, capacity: float, generator_limit: float = math.inf) -> list[float]:
    """Run the search against a fake system that passes below `capacity`."""
    tried = []
    while (rate := state.next_rate()) is not None:
        tried.append(rate)
        state.record(rate, GENERATOR_LIMIT if rate > generator_limit else (PASS if rate <= capacity else FAIL))
        assert len(tried) < 50
    return tried


def test_search_grows_then_bisects_to_the_tolerance():
    state = SearchState(start_rate=100, growth=2, tolerance=0.05)
    tried = drive(state, capacity=410)
    assert tried[:4] == [100, 200, 400, 800]
    assert state.converged() and state.highest_pass <= 410 < state.lowest_fail
    assert state.lowest_fail / state.highest_pass - 1 <= 0.05


def test_search_shrinks_when_the_first_rate_fails():
    state = SearchState(start_rate=1000, growth=2, tolerance=0.05)
    tried = drive(state, capacity=90)
    assert tried[:5] == [1000, 500, 250, 125, 62.5]
    assert state.converged() and state.highest_pass <= 90 < state.lowest_fail


def test_search_stops_at_the_generator_limit_with_an_at_least_answer():
    state = SearchState(start_rate=100, growth=2, tolerance=0.05)
    tried = drive(state, capacity=10_000, generator_limit=1000)
    assert tried == [100, 200, 400, 800, 1600] and state.generator_limited and state.highest_pass == 800


def _verdict(metric, verdict, endpoint="e", region="r"):
    return {"metric": metric, "verdict": verdict, "description": f"{metric} slo", "endpoint": endpoint,
            "region": region}


@pytest.mark.parametrize("verdicts,valid,reasons,outcome", [
    ([_verdict("latency", "PASS"), _verdict("error_rate", "INCONCLUSIVE")], True, [], PASS),
    ([_verdict("latency", "PASS"), _verdict("latency", "INCONCLUSIVE", region="r2")], True, [], UNDECIDED),
    ([_verdict("latency", "FAIL")], False, ["w: send lag p99 9 ms > 5 ms (generator saturated)"], FAIL),
    ([_verdict("latency", "PASS")], False, ["w: send lag p99 9 ms > 5 ms (generator saturated)"], GENERATOR_LIMIT),
    ([_verdict("latency", "PASS"), _verdict("error_rate", "FAIL")], True, [], FAIL),
    ([_verdict("latency", "PASS")], False, ["w: no worker summary"], FAIL),
])
def test_trial_outcome(verdicts, valid, reasons, outcome):
    assert classify_trial(verdicts, valid, reasons)[0] == outcome


@pytest.mark.parametrize("outcome, duration, retried, expected", [
    (UNDECIDED, 8, False, 16),      # too few samples: twice as long
    (UNDECIDED, 40, False, 60),     # ... up to max_s
    (UNDECIDED, 60, False, None),   # already at max_s: accept (counted as not passing)
    (GENERATOR_LIMIT, 8, False, 8),  # one stall must not end the search: once more, same length
    (GENERATOR_LIMIT, 8, True, None),  # twice saturated: the generator limit is real
    (PASS, 8, False, None),
    (FAIL, 8, False, None),
])
def test_which_trials_run_again(outcome, duration, retried, expected):
    assert retry_duration_s(outcome, duration, 60, retried) == expected


def test_trial_long_enough_for_the_percentile_of_the_smallest_group():
    profile = {"regions": [{"name": "a", "share": 0.75}, {"name": "b", "share": 0.25}],
               "endpoints": [{"name": "x"}, {"name": "y"}]}
    slos = [{"metric": "latency", "percentile": 99, "threshold_ms": 50, "endpoint": "*", "region": "*"}]
    # p99 needs 368 samples; smallest group gets 0.25 × 0.5 of 200/s = 25/s; margin 3 → 44.16 s
    assert trial_duration_s(200, slos, profile, 5, 600, 3) == 45
    assert trial_duration_s(200, slos, profile, 5, 30, 3) == 30
    assert trial_duration_s(1e6, slos, profile, 5, 600, 3) == 5


def test_recommendation_follows_littles_law_and_the_utilization_bound():
    rec = recommendation(capacity_rps=400, mean_service_ms=2.0, slots=1, mean_latency_ms=10.0, headroom=1.5,
                         max_utilization=0.7, peak_rate=1000)
    assert rec["rate_by_slo_headroom"] == pytest.approx(266.67, rel=1e-3)
    assert rec["rate_by_utilization"] == pytest.approx(350)
    assert rec["planned_rate_per_instance"] == pytest.approx(266.67, rel=1e-3) and rec["limited_by"] == "latency SLO"
    assert rec["in_flight_at_planned"] == pytest.approx(2.667, rel=1e-3)  # L = λ W
    assert rec["instances_for_peak"] == 4
    slow = recommendation(400, 4.0, 1, 10.0, 1.5, 0.7, None)
    assert slow["planned_rate_per_instance"] == pytest.approx(175) and slow["limited_by"] == "utilization"


MM1_S_MS, SLO_MS = 2.0, 50.0
# the endpoint on one CPU, the generator on another, as in the M/M/1 test: sharing both, they delay each other
ENDPOINT_CPUS, GENERATOR_CPUS = split_cpus()


def mm1_profile(model_repo):
    return parse_profile({
        "name": "cap-test",
        "endpoints": [{"name": "mm1", "url": "embedded", "protocol": "kserve-http", "model": "synthetic_mm1",
                       "timeout_ms": 2000}],
        "regions": [{"name": "local", "share": 1.0}],
        "load": {"rate": 100, "duration_s": 5, "seed": 3},
        "clock": {"servers": ["embedded"], "interval_s": 2},
        "embedded": {"models_dir": str(model_repo), "mm1_mean_ms": MM1_S_MS, "cpus": ENDPOINT_CPUS},
        # The rates here (100–400/s) are a sixth of what one worker core sustains: a send-lag window over 5 ms
        # is a stall of this shared VM, not a saturated generator (a fresh-clone run saw the 100/s trial flagged
        # twice). 20 ms still catches a generator that cannot keep up.
        "generator": {"send_lag_p99_ms": 20, "cpus": GENERATOR_CPUS},
        "slos": [{"metric": "latency", "percentile": 99, "threshold_ms": SLO_MS}],
        "capacity": {"start_rate": 100, "growth": 2, "tolerance": 0.05, "budget_s": 900, "min_trial_s": 8,
                     "peak_rate": 600},
    }, "capacity test profile")


@pytest.mark.timeout(900)  # ~10 trials of ~30 s each, more when a trial is retried (the suite's default is 300 s)
def test_capacity_search_on_mm1_matches_queueing_theory(model_repo, tmp_path):
    cap_dir, result = run_capacity(mm1_profile(model_repo), tmp_path, quiet=True)
    # M/M/1 sojourn time is Exp(μ − λ): p99 = ln(100) / (μ − λ) = T  ⇒  λ* = μ − ln(100) / T
    theory = 1000 / MM1_S_MS - math.log(100) / (SLO_MS / 1000)
    assert result["status"] == "found", result["note"]
    # Within 15% of M/M/1 above; below, 25%: this VM's hypervisor takes CPU in bursts under load (steal),
    # and stalls only ever add latency, so they can make the search find less than theory, never more.
    assert -0.25 < (result["capacity_rps"] - theory) / theory < 0.15, (result["capacity_rps"], theory)
    lo, hi = result["bracket"]
    assert hi / lo - 1 <= 0.05
    rows = json.loads((cap_dir / "capacity.json").read_text())["trial_rows"]
    assert list(dict.fromkeys(r["rate"] for r in rows))[:3] == [100, 200, 400]  # a retried rate repeats
    assert all(r["p99_ms"] < SLO_MS for r in rows if r["outcome"] == PASS)
    rec = result["recommendation"]
    assert rec["planned_rate_per_instance"] <= lo / 1.5 + 1e-9 and rec["instances_for_peak"] >= 600 / (lo / 1.5)
    for name in ("index.html", "trials.csv", "latency_vs_load.svg"):
        assert (cap_dir / name).stat().st_size > 0
    assert "<svg" in (cap_dir / "index.html").read_text()
    assert len(list((cap_dir / "trials").iterdir())) == len(rows)


def test_capacity_refuses_profiles_without_a_latency_slo(model_repo, tmp_path):
    profile = mm1_profile(model_repo).model_copy(update={"slos": []})
    with pytest.raises(CapacityError, match="slos: capacity search needs at least one latency SLO"):
        run_capacity(profile, tmp_path, quiet=True)
