"""Capacity search: the pure search / trial logic, and a real search on synthetic_mm1 against M/M/1 theory."""


from __future__ import annotations

import json
import math

import pytest

from tailrace.analysis.decide.capacity_search import (
    PASS,
)
from tailrace.capacity import CapacityError, run_capacity
from tailrace.contract.profile import parse_profile
from tests.support import split_cpus

MM1_S_MS, SLO_MS = 2.0, 50.0


ENDPOINT_CPUS, GENERATOR_CPUS = split_cpus()


# A coarse search — 300 (p99 ~23 ms), 600 (fails), 450 (p99 ~92 ms: fails): three short trials, none near theory
# (~408/s), where a 4 s trial is INCONCLUSIVE and retried longer — checks the search against theory as far as its
# bracket resolves; bench/capacity_mm1.py runs the fine one (5%, ~10 trials) and docs/BENCHMARKS.md has its figure.
# (From 200 the search went 200, 400, 800, 600, 500: 400 sits just under theory; from 250, 375 was undecided.)
TOLERANCE = 0.5


def mm1_profile(model_repo):
    return parse_profile({
        "name": "cap-test",
        "endpoints": [{"name": "mm1", "url": "embedded", "protocol": "kserve-http", "model": "synthetic_mm1",
                       "timeout_ms": 2000}],
        "regions": [{"name": "local", "share": 1.0}],
        "load": {"rate": 100, "duration_s": 5, "seed": 3},
        "clock": {"servers": ["embedded"], "interval_s": 2},
        "embedded": {"models_dir": str(model_repo), "mm1_mean_ms": MM1_S_MS, "cpus": ENDPOINT_CPUS},
        # The rates here (300–600/s) are a fifth of what one worker core sustains: a send-lag window over 5 ms
        # is a stall of this shared VM, not a saturated generator (a fresh-clone run saw the 100/s trial flagged
        # twice). 20 ms still catches a generator that cannot keep up.
        "generator": {"send_lag_p99_ms": 20, "cpus": GENERATOR_CPUS},
        "slos": [{"metric": "latency", "percentile": 99, "threshold_ms": SLO_MS}],
        "capacity": {"start_rate": 300, "growth": 2, "tolerance": TOLERANCE, "budget_s": 600, "min_trial_s": 4,
                     "samples_margin": 1.5, "peak_rate": 600},
        # the server's process watched: energy per request at each rate (an estimate: no counter here)
        "monitors": [{"name": "server", "url": "embedded", "interval_s": 0.5, "watts_per_core": 10}],
    }, "capacity test profile")


@pytest.mark.timeout(600)  # 3 trials, more when one is retried (default 300 s)
def test_capacity_search_on_mm1_matches_queueing_theory(model_repo, tmp_path):
    cap_dir, result = run_capacity(mm1_profile(model_repo), tmp_path, quiet=True)
    # M/M/1 sojourn time is Exp(μ − λ): p99 = ln(100) / (μ − λ) = T  ⇒  λ* = μ − ln(100) / T
    theory = 1000 / MM1_S_MS - math.log(100) / (SLO_MS / 1000)
    assert result.status == "found", result.note
    lo, hi = result.bracket
    assert hi / lo - 1 <= TOLERANCE and result.capacity_rps == lo, (result.bracket, result.capacity_rps)
    # The bracket holds theory, within 15% above it; below, 25%: this VM's hypervisor takes CPU in bursts under
    # load (steal), and stalls only ever add latency, so they can make the search find less than theory, never more.
    assert lo < theory * 1.15 and hi > theory * 0.75, (result.bracket, theory)
    rows = json.loads((cap_dir / "capacity.json").read_text())["trial_rows"]
    assert list(dict.fromkeys(r["rate"] for r in rows))[:2] == [300, 600]  # a retried rate repeats
    for r in (r for r in rows if r["outcome"] == PASS):
        # the trial's own p99 is withheld (None) when its requests are worth fewer independent samples than a p99
        # interval needs; the SLO verdict decides on the exceedance proportion and always states what it measured
        assert r["p99_ms"] is None or r["p99_ms"] < SLO_MS, r
        summary = json.loads((cap_dir / "trials" / r["run_id"] / "report" / "summary.json").read_text())
        # the declared latency SLO, and the implicit error-rate one (the profile declares none)
        assert [(v["metric"], v["implicit"], v["verdict"]) for v in summary["slos"]] == [
            ("latency", False, "PASS"), ("error_rate", True, "PASS")]
        assert summary["slos"][0]["measured"] < SLO_MS
    assert any(r["p99_ms"] is not None for r in rows if r["outcome"] == PASS), rows
    rec = result.recommendation
    assert rec.planned_rate_per_instance <= lo / 1.5 + 1e-9 and rec.instances_for_peak >= 600 / (lo / 1.5)
    for name in ("index.html", "trials.csv", "latency_vs_load.svg"):
        assert (cap_dir / name).stat().st_size > 0
    assert "<svg" in (cap_dir / "index.html").read_text()
    assert len(list((cap_dir / "trials").iterdir())) == len(rows)
    # energy at each rate and at capacity, an estimate said as one; synthetic_mm1 sleeps its service time, so its
    # model's CPU is far below ρ: the utilization law says the slot waits on something other than the CPU
    assert all(r["estimated_energy_per_request_mj"] > 0 and r["energy_per_request_mj"] is None for r in rows)
    assert all(r["measured_utilization"] < 0.5 * r["utilization"] for r in rows), rows
    assert result.capacity_estimated_energy_per_request_mj > 0 and "an estimate" in result.note


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_capacity_refuses_profiles_without_a_latency_slo(model_repo, tmp_path):
    profile = mm1_profile(model_repo).model_copy(update={"slos": []})
    with pytest.raises(CapacityError, match="slos: capacity search needs at least one latency SLO"):
        run_capacity(profile, tmp_path, quiet=True)


def test_a_trial_above_capacity_fails_on_its_growing_backlog(model_repo, tmp_path):
    """ρ ≈ 1.2 for 6 s with an SLO so lenient that the trial's percentiles pass it: the queue grows throughout
    (latency rises from ~0 to ~1 s), so the trial must fail on its backlog, never pass. The requests wait as long as
    the queue holds them: with the profile's 2 s timeout a VM whose host took CPU (steal) stretched the service time,
    the queue reached the timeout and a third of the requests failed — a fail on errors, not the backlog this tests."""
    from tailrace.capacity import _trial_profile, _trial_row, run_once

    profile = mm1_profile(model_repo)
    profile = profile.model_copy(update={
        "slos": [s.model_copy(update={"threshold_ms": 10_000.0}) for s in profile.slos],
        "endpoints": [e.model_copy(update={"timeout_ms": 30_000}) for e in profile.endpoints]})
    rate = 1.2 * 1000 / MM1_S_MS
    run_dir = run_once(_trial_profile(profile, rate, 6.0, 0), tmp_path, None)
    row = _trial_row(0, rate, 6.0, run_dir)
    print(f"trial at {rate:g}/s: {row.outcome} — {row.why}; p99 {row.p99_ms} ms")
    assert row.outcome == "fail" and row.why.startswith("backlog growing"), row
    assert "latency rose through the run" in row.why


# synthetic_lm's known times (endpoints/models/generative_build.py): a step of every running sequence takes
# STEP_MS + PER_SEQ_MS × sequences (+ 0.02 ms a prompt token); a request holds one of MAX_NUM_SEQS places for
# OUTPUT steps (its prefill step gives the first token). The most it can serve: MAX_NUM_SEQS / (OUTPUT × step).
STEP_MS, PER_SEQ_MS, MAX_NUM_SEQS, OUTPUT, TTFT_SLO_MS = 8.0, 0.1, 4, 16, 250.0


def lm_profile(model_repo):
    return parse_profile({
        "name": "cap-lm",
        "endpoints": [{"name": "lm", "url": "embedded", "protocol": "openai-chat", "model": "synthetic_lm",
                       "timeout_ms": 30000,
                       "prompts": {"input_tokens": {"mean": 16}, "output_tokens": {"mean": OUTPUT}, "count": 64}}],
        "regions": [{"name": "local", "share": 1.0}],
        "load": {"rate": 8, "duration_s": 5, "seed": 5},
        "clock": {"servers": ["embedded"], "interval_s": 2},
        "embedded": {"models_dir": str(model_repo), "max_num_seqs": {"synthetic_lm": MAX_NUM_SEQS},
                     "cpus": ENDPOINT_CPUS},
        "generator": {"send_lag_p99_ms": 20, "cpus": GENERATOR_CPUS},
        "slos": [{"metric": "ttft", "percentile": 95, "threshold_ms": TTFT_SLO_MS},
                 {"metric": "tpot", "percentile": 90, "threshold_ms": 12}],
        "capacity": {"start_rate": 20, "growth": 1.6, "tolerance": 0.65, "budget_s": 600, "min_trial_s": 5,
                     "max_trial_s": 20, "samples_margin": 1.5},
    }, "generative capacity test profile")


@pytest.mark.timeout(600)
def test_capacity_search_on_synthetic_lm_finds_its_rate_and_tokens_per_second(model_repo, tmp_path):
    """TTFT p95 < 250 ms and TPOT p90 < 12 ms on synthetic_lm with 4 places: TPOT stays one step (~8.5 ms) at
    any rate, so TTFT decides. Its ceiling is 4 / (16 × 8.4 ms) ≈ 29.8 requests/s; a discrete-step simulation of
    the same scheduler puts the TTFT SLO's rate at ~23–24/s (the queue grows steeply past ~26/s). The search (20, then
    32 past the ceiling: two trials, the bracket then within 65%; rates near 24 are too close to the SLO to decide in
    a short trial) must answer below the ceiling and above 55% of it, with output
    tokens/s = its rate × 16."""
    cap_dir, result = run_capacity(lm_profile(model_repo), tmp_path, quiet=True)
    ceiling = MAX_NUM_SEQS / (OUTPUT * (STEP_MS + PER_SEQ_MS * MAX_NUM_SEQS) / 1000)
    rows = json.loads((cap_dir / "capacity.json").read_text())["trial_rows"]
    trials = [(r["rate"], r["outcome"], r["why"][:120]) for r in rows]
    assert result.status == "found", (result.note, trials)
    assert 0.55 * ceiling < result.capacity_rps < ceiling, (result.capacity_rps, ceiling, trials)
    tokens = result.capacity_output_tokens_per_s
    assert tokens == pytest.approx(result.capacity_rps * OUTPUT, rel=0.15), (tokens, result.capacity_rps)
    assert "output tokens/s at that rate" in result.note
    passing = [r for r in rows if r["outcome"] == PASS]
    assert passing and all(r["tpot_p50_ms"] < 12 for r in passing), rows
    failing = [r for r in rows if r["outcome"] == "fail"]
    assert failing and all("TTFT" in r["why"] or "backlog" in r["why"] for r in failing), failing
    assert "TTFT p50" in (cap_dir / "index.html").read_text()
