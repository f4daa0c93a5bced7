"""The capacity search's pure parts: growth and bisection, trial outcomes, retries, trial length, the recommendation."""


from __future__ import annotations

import math

import pytest

from tailrace.analysis.decide.capacity_search import (
    FAIL,
    GENERATOR_LIMIT,
    PASS,
    UNDECIDED,
    SearchState,
    classify_trial,
    duration_to_decide_s,
    recommendation,
    retry_duration_s,
    trial_duration_s,
)
from tailrace.contract.summary import CapacityTrial, SloVerdict
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
    return SloVerdict(slo=0, metric=metric, verdict=verdict, description=f"{metric} slo", endpoint=endpoint,
                      region=region, n=1000)


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


@pytest.mark.parametrize("outcome, duration, retried, to_decide, first, expected", [
    (UNDECIDED, 8, False, 10, False, 16),      # a few more samples: at least twice as long
    (UNDECIDED, 8, False, 40, False, 50),      # as long as deciding takes, with DECIDE_MARGIN
    (UNDECIDED, 40, False, 55, False, 60),     # ... up to max_s
    (UNDECIDED, 16, False, 61, False, None),   # deciding takes longer than max_s: as near capacity as it resolves
    (UNDECIDED, 16, False, None, False, None),  # the slow share sits on the bound: no trial decides it
    (UNDECIDED, 8, False, 61, True, 16),       # ... but the first trial at a rate gets a second, twice as long
    (UNDECIDED, 8, False, None, True, 16),     # (a stall can put a short trial's slow share near the bound)
    (UNDECIDED, 8, False, 40, True, 50),
    (UNDECIDED, 60, False, 59, False, None),   # already at max_s: accept (counted as not passing)
    (GENERATOR_LIMIT, 8, False, None, True, 8),  # one stall must not end the search: once more, same length
    (GENERATOR_LIMIT, 8, True, None, False, None),  # twice saturated: the generator limit is real
    (PASS, 8, False, None, True, None),
    (FAIL, 8, False, None, True, None),
])
def test_which_trials_run_again(outcome, duration, retried, to_decide, first, expected):
    assert retry_duration_s(outcome, duration, 60, retried, to_decide, first) == expected


def test_how_long_an_undecided_trial_would_take_to_decide():
    """The trial's duration scaled by (n + samples still needed) / n of its neediest INCONCLUSIVE latency group,
    from the verdicts `tailrace analyze` gives; None when some group can never decide."""
    from tailrace.analysis.stats.estimators import proportion_verdict

    def verdict(k, n, metric="latency"):
        v = proportion_verdict(k, n, 0.01)
        return SloVerdict(slo=0, description="p99 < 10 ms", metric=metric, endpoint="e", region="r",
                          verdict=v.verdict, n=n, more_samples_needed=v.more_samples_needed)

    near, far, passing = verdict(9, 1000), verdict(5, 1000), verdict(1, 2000)
    assert (near.verdict, far.verdict, passing.verdict) == ("INCONCLUSIVE", "INCONCLUSIVE", "PASS")
    assert near.more_samples_needed > far.more_samples_needed > 0
    assert duration_to_decide_s([far, passing], 8) == pytest.approx(8 * (1000 + far.more_samples_needed) / 1000)
    assert duration_to_decide_s([far, near], 8) == pytest.approx(8 * (1000 + near.more_samples_needed) / 1000)
    # the retry really holds the samples: at the rate of this trial, (n + more) samples take that long
    k, n = 5, 1000
    more = far.more_samples_needed
    assert proportion_verdict(round(k / n * (n + more)), n + more, 0.01).verdict == "PASS"
    assert duration_to_decide_s([passing, verdict(5, 10, "error_rate")], 8) == 8  # nothing latency left to decide
    assert duration_to_decide_s([far, near.model_copy(update={"more_samples_needed": None})], 8) is None
    # a PASS made INCONCLUSIVE by latency falling through the trial (still settling): twice as long
    settling = passing.model_copy(update={"verdict": "INCONCLUSIVE", "trend": "falling"})
    assert duration_to_decide_s([passing, settling], 8) == 16
    assert retry_duration_s(UNDECIDED, 16, 60, False, duration_to_decide_s([settling], 16)) == 40  # × DECIDE_MARGIN
    assert duration_to_decide_s([far.model_copy(update={"n": 0})], 8) is None


def test_trial_long_enough_for_the_percentile_of_the_smallest_group():
    from tailrace.contract.profile import Slo

    shares, weights = {"a": 0.75, "b": 0.25}, {"x": 1.0, "y": 1.0}
    slos = [Slo(metric="latency", percentile=99.0, threshold_ms=50.0)]
    # p99 needs 368 samples; smallest group gets 0.25 × 0.5 of 200/s = 25/s; margin 3 → 44.16 s
    assert trial_duration_s(200, slos, shares, weights, 5, 600, 3) == 45
    assert trial_duration_s(200, slos, shares, weights, 5, 30, 3) == 30
    assert trial_duration_s(1e6, slos, shares, weights, 5, 600, 3) == 5


def test_recommendation_follows_littles_law_and_the_utilization_bound():
    rec = recommendation(capacity_rps=400, mean_service_ms=2.0, slots=1, mean_latency_ms=10.0, headroom=1.5,
                         max_utilization=0.7, peak_rate=1000)
    assert rec.rate_by_slo_headroom == pytest.approx(266.67, rel=1e-3)
    assert rec.rate_by_utilization == pytest.approx(350)
    assert rec.planned_rate_per_instance == pytest.approx(266.67, rel=1e-3) and rec.limited_by == "latency SLO"
    assert rec.in_flight_at_planned == pytest.approx(2.667, rel=1e-3)  # L = λ W
    assert rec.instances_for_peak == 4
    slow = recommendation(400, 4.0, 1, 10.0, 1.5, 0.7, None)
    assert slow.planned_rate_per_instance == pytest.approx(175) and slow.limited_by == "utilization"


MM1_S_MS, SLO_MS = 2.0, 50.0


ENDPOINT_CPUS, GENERATOR_CPUS = split_cpus()




def _p99_profile():
    """One endpoint with a p99 latency SLO: what summarize reads of a profile."""
    from tailrace.contract.profile import parse_profile

    return parse_profile({
        "name": "cap", "endpoints": [{"name": "e", "url": "http://127.0.0.1:9", "protocol": "kserve-http",
                                      "model": "m"}],
        "regions": [{"name": "r", "share": 1.0}], "load": {"rate": 100, "duration_s": 5},
        "slos": [{"metric": "latency", "percentile": 99, "threshold_ms": 50}]}, "test profile")


def _trial(rate: float, outcome: str) -> CapacityTrial:
    return CapacityTrial(trial=0, rate=rate, duration_s=8, achieved_rate=rate, count=800, errors=0, outcome=outcome,
                         why="", run_id="r", mean_service_ms=2.0, slots=1, mean_ms=5.0)


def test_the_answer_says_whether_the_rate_above_failed_or_could_not_be_decided():
    """The answer says whether a trial failed at the bracket's upper rate, or whether that rate was counted as not
    passing because no trial up to max_trial_s could decide it."""
    from tailrace.capacity import summarize

    profile = _p99_profile()

    for above, words in ((FAIL, "failed"),
                         (UNDECIDED, "no trial up to max_trial_s could decide (as near capacity as the search "
                                     "resolves)")):
        state = SearchState(100)
        for rate, outcome in ((100, PASS), (200, PASS), (400, FAIL), (390, PASS)):
            state.record(rate, outcome)
        rows = [_trial(100, PASS), _trial(200, PASS), _trial(400, above), _trial(390, PASS)]
        result = summarize(state, rows, profile, False, 60.0)
        assert result.status == "found" and result.capacity_rps == 390, result
        assert result.note == f"capacity 390 req/s, within 5% of the next rate, 400, which {words}", result.note


def test_a_search_interrupted_before_its_bracket_closed_answers_from_the_trials_that_finished():
    """Ctrl-C or SIGTERM mid-search: status stopped, exit code 3, and the note says what the finished trials found
    (never "no tried rate passed", which a search that was cut short has not shown)."""
    from tailrace.capacity import summarize

    profile = _p99_profile()

    for trials, status, note in (
            ([], "stopped", "interrupted before the bracket closed: no trial finished"),
            ([(100, FAIL)], "stopped",
             "interrupted before the bracket closed: no rate so far passed (the lowest that failed: 100 req/s)"),
            ([(100, PASS), (200, PASS)], "stopped",
             "interrupted before the bracket closed: every rate so far passed: capacity is at least 200 req/s"),
            ([(100, PASS), (200, FAIL)], "stopped",
             "interrupted before the bracket closed: capacity between 100 and 200 req/s"),
            ([(100, PASS), (200, FAIL), (150, PASS), (175, FAIL), (160, PASS), (168, FAIL), (164, PASS)], "found",
             "capacity 164 req/s, within 5% of the next rate, 168, which failed")):
        state = SearchState(100)
        for rate, outcome in trials:
            state.record(rate, outcome)
        result = summarize(state, [_trial(r, o) for r, o in trials], profile, False, 30.0, stopped=True)
        assert (result.status, result.exit_code) == (status, 3 if status == "stopped" else 0), result
        assert result.note.startswith(note), result.note
