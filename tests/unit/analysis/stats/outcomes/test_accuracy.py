"""Accuracy under load, pure: the rows count each grade where it belongs, the trend finds a fall that is there and
none that is not (its interval covering the true slope at the rate it claims), the accuracy SLO is judged on its
interval."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tailrace.analysis.stats.outcomes.accuracy import accuracy_rows, accuracy_trends, accuracy_verdicts, trend


def frame(grades_by_phase: dict[int, list[str]], region: str = "near") -> pd.DataFrame:
    rows = []
    t = 0
    for phase, grades in grades_by_phase.items():
        for grade in grades:
            t += 1_000_000
            rows.append({"endpoint": "math", "region": region, "phase": phase, "grade": grade, "item": 0,
                         "status": "ok" if grade not in ("cut", "error") else "timeout", "t_intended": t,
                         "latency_ns": 5_000_000, "output_tokens": 10, "t_first_token": t + 1, "t_last_token": t + 2,
                         "ttft_ns": 1_000_000, "token_event_us": b"", "token_event_counts": b""})
    return pd.DataFrame(rows)


def test_rows_count_the_models_answers_apart_from_what_was_not_its_answer():
    df = frame({0: ["correct"] * 3, 1: ["correct"] * 8 + ["wrong", "unparsable"], 2: ["correct"] * 5 + ["wrong"] * 3
                + ["truncated", "cut", "error", "grader_error"]})
    rows = accuracy_rows(df, {1: 5.0, 2: 20.0}, 10.0)
    by = {(r.region, r.phase): r for r in rows}
    one, two, whole = by[("near", 1)], by[("near", 2)], by[("*", 0)]
    assert (one.judged, one.correct, one.accuracy, one.offered_rps) == (10, 8, 0.8, 5.0)
    assert (two.judged, two.truncated, two.cut, two.error, two.grader_error) == (8, 1, 1, 1, 1)
    assert two.accuracy == pytest.approx(5 / 8) and two.ci_low < 5 / 8 < two.ci_high
    assert whole.graded == 22 and whole.judged == 18 and whole.correct == 13  # the warm-up (phase 0) is not counted
    assert whole.correct_goodput_rps == pytest.approx(13 / 10.0)  # no SLO: every right answer is on time


def test_correct_goodput_counts_only_right_answers_on_time():
    df = frame({1: ["correct"] * 6 + ["wrong"] * 4})
    df.loc[df.index[:2], "latency_ns"] = 90_000_000  # two right answers, late for the e2e goal
    slos = [{"metric": "e2e", "percentile": 90, "threshold_ms": 50, "endpoint": "*", "region": "*"}]
    (whole,) = [r for r in accuracy_rows(df, {1: 5.0}, 2.0, slos) if r.region == "*" and r.phase == 0]
    assert whole.correct_goodput_rps == pytest.approx(4 / 2.0)


def test_the_trend_finds_a_fall_and_its_interval_covers_the_truth():
    rng = np.random.default_rng(3)
    loads = np.array([5.0, 10.0, 20.0, 40.0])
    truth = -0.004  # per req/s
    covered = found = 0
    for _ in range(400):
        n = np.full(4, 300)
        k = rng.binomial(n, 0.95 + truth * (loads - 5.0))
        t = trend(loads, k, n)
        covered += t["slope_ci_low"] <= truth <= t["slope_ci_high"]
        found += t["verdict"] == "falls"
    assert covered / 400 > 0.92  # a 95% interval
    assert found / 400 > 0.9


def test_no_trend_where_there_is_none_and_none_tested_with_one_load():
    rng = np.random.default_rng(5)
    loads = np.array([5.0, 10.0, 20.0, 40.0])
    falses = sum(trend(loads, rng.binomial(200, 0.9, 4), np.full(4, 200))["verdict"] != "holds" for _ in range(400))
    assert falses / 400 < 0.08  # the test's level, 5%
    assert trend([5.0, 5.0], [9, 8], [10, 10]) == {"verdict": "not tested"}


def test_trends_read_the_rows_per_endpoint_by_load():
    df = frame({1: ["correct"] * 95 + ["wrong"] * 5, 2: ["correct"] * 70 + ["wrong"] * 30})
    (tr,) = accuracy_trends(accuracy_rows(df, {1: 4.0, 2: 40.0}, 10.0))
    assert tr.loads == [4.0, 40.0] and tr.accuracy == [0.95, 0.7] and tr.verdict == "falls"
    assert tr.change == pytest.approx(-0.25) and tr.p_value < 1e-4


def test_the_accuracy_slo_is_judged_on_its_interval():
    slo = {"metric": "accuracy", "minimum": 0.8, "endpoint": "*", "region": "*"}
    rng = np.random.default_rng(1)

    def verdict(p: float, n: int) -> dict:
        grades = np.where(rng.random(n) < p, "correct", "wrong").tolist()
        (v,) = accuracy_verdicts(frame({1: grades}), [(0, slo)], ["math"], ["near"])
        return v
    assert verdict(0.97, 400).verdict == "PASS"
    assert verdict(0.6, 400).verdict == "FAIL"
    unsure = verdict(0.82, 60)
    assert unsure.verdict == "INCONCLUSIVE" and unsure.more_samples_needed > 60
    assert unsure.ci_low < unsure.measured < unsure.ci_high and unsure.description == "accuracy ≥ 80.0%"
