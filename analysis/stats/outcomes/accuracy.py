"""Graded answers (prompts.graded): accuracy per endpoint × region × phase with its exact interval, accuracy against
offered load with a trend test, correct goodput, and the accuracy SLO's verdicts. Pure functions of the measured
rows (docs/METHODS.md, "Accuracy under load")."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from tailrace.analysis.read.frames import strings
from tailrace.analysis.stats.correlation import integrated_time
from tailrace.analysis.stats.estimators import clopper_pearson, proportion_verdict
from tailrace.analysis.stats.tokens import good_streams
from tailrace.contract.summary.accuracy import AccuracyRow, AccuracyTrend
from tailrace.contract.summary.tables import SloVerdict

GRADE_COLUMNS = ("grade", "item")
JUDGED = ("correct", "wrong", "unparsable")  # the model's answers; the rest are counted apart
APART = ("truncated", "cut", "error", "grader_error")
ALPHA = 0.05


def by_answerer(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with each pipeline's graded answers under the pipeline's name ("pipeline NAME") in place of its generate
    stage's endpoint: a pipeline's accuracy is its own, never mixed into the endpoint's own graded items."""
    if "pipeline" not in df or not len(df):
        return df
    piped = strings(df["pipeline"])
    staged = piped != ""
    if not staged.any():
        return df
    return df.assign(endpoint=np.where(staged, np.char.add("pipeline ", piped.astype(str)),
                                       strings(df["endpoint"])))


def graded_positions(df: pd.DataFrame) -> np.ndarray:
    """Positions of the measured phases' graded requests."""
    if "grade" not in df or not len(df):
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero((strings(df["grade"]) != "") & (df["phase"].to_numpy() > 0))


def _counts(grades: np.ndarray) -> dict[str, int]:
    return {g: int(np.count_nonzero(grades == g)) for g in (*JUDGED, *APART)}


def _row(endpoint: str, region: str, phase: int, grades: np.ndarray, offered: float | None) -> AccuracyRow:
    counts = _counts(grades)
    judged = sum(counts[g] for g in JUDGED)
    low, high = clopper_pearson(counts["correct"], judged) if judged else (None, None)
    return AccuracyRow(endpoint=endpoint, region=region, phase=phase, offered_rps=offered, graded=len(grades),
                       judged=judged, **counts, accuracy=counts["correct"] / judged if judged else None,
                       ci_low=low, ci_high=high)


def accuracy_rows(df: pd.DataFrame, phase_rates: dict[int, float | None], duration_s: float,
                  slos: Sequence[dict] = (), streamed: set[str] | None = None) -> list[AccuracyRow]:
    """Per endpoint × region × phase, per endpoint × phase (region "*"), and per endpoint × region over every measured
    phase (phase 0, with its correct goodput: graded requests per second that were on time for every SLO that
    applies and correct) — [] where nothing was graded. `phase_rates`: each phase's offered rate (req/s)."""
    at = graded_positions(df)
    if not len(at):
        return []
    endpoint = strings(df["endpoint"])[at]
    region = strings(df["region"])[at]
    phase = df["phase"].to_numpy()[at].astype(int)
    grades = strings(df["grade"])[at]
    good = _good_and_correct(df, at, list(slos), streamed if streamed is not None else set(endpoint))
    rows = []
    for e in sorted(set(endpoint)):
        mine = endpoint == e
        for r in [*sorted(set(region[mine])), "*"]:
            here = mine & ((region == r) if r != "*" else True)
            for p in sorted(set(phase[here])):
                rows.append(_row(e, r, int(p), grades[here & (phase == p)], phase_rates.get(int(p))))
            whole = _row(e, r, 0, grades[here], None)
            whole.correct_goodput_rps = float(good[here].sum() / duration_s) if duration_s > 0 else None
            rows.append(whole)
    return rows


def _good_and_correct(df: pd.DataFrame, at: np.ndarray, slos: list[dict], streamed: set[str]) -> np.ndarray:
    """For each graded position in `at`: correct, and on time for every token SLO that applies to it."""
    correct = strings(df["grade"])[at] == "correct"
    rows, good = good_streams(df, slos, streamed)
    on_time = np.zeros(len(df), dtype=bool)
    on_time[rows] = good
    return correct & on_time[at]


def trend(loads: Sequence[float], correct: Sequence[int], judged: Sequence[int]) -> dict:
    """Accuracy against load: the weighted least-squares slope of accuracy on load with a 95% interval (each load's
    binomial variance at its own accuracy), the Cochran–Armitage test's two-sided p-value, the change from the lowest load
    to the highest, and the verdict (falls / rises at p < 0.05, else holds; not tested with fewer than two loads)."""
    x, k, n = (np.asarray(v, dtype=float) for v in (loads, correct, judged))
    keep = n > 0
    x, k, n = x[keep], k[keep], n[keep]
    if len(np.unique(x)) < 2:
        return {"verdict": "not tested"}
    total = n.sum()
    p_bar = k.sum() / total
    x_bar = (n * x).sum() / total
    sxx = (n * (x - x_bar) ** 2).sum()
    t_stat = (k * (x - x_bar)).sum()
    slope = t_stat / sxx
    p_each = (k + 0.5) / (n + 1)  # each load's accuracy, kept off 0 and 1 so that no load's variance is nil
    se = math.sqrt((n * (x - x_bar) ** 2 * p_each * (1 - p_each)).sum()) / sxx
    z_crit = stats.norm.ppf(1 - ALPHA / 2)
    variance = p_bar * (1 - p_bar) * sxx
    p_value = 1.0 if variance <= 0 else float(2 * stats.norm.sf(abs(t_stat) / math.sqrt(variance)))
    order = np.argsort(x)
    change = float(k[order[-1]] / n[order[-1]] - k[order[0]] / n[order[0]])
    verdict = "holds" if p_value >= ALPHA else ("falls" if slope < 0 else "rises")
    return {"slope_per_rps": float(slope), "slope_ci_low": float(slope - z_crit * se),
            "slope_ci_high": float(slope + z_crit * se), "p_value": p_value, "change": change, "verdict": verdict}


def accuracy_trends(rows: Sequence[AccuracyRow]) -> list[AccuracyTrend]:
    """Each endpoint's accuracy against its phases' offered loads (region "*"), where two or more phases had one."""
    out = []
    for endpoint in sorted({r.endpoint for r in rows}):
        points = sorted((r for r in rows if r.endpoint == endpoint and r.region == "*" and r.phase > 0
                         and r.offered_rps is not None), key=lambda r: r.offered_rps or 0.0)
        if not points:
            continue
        loads = [float(r.offered_rps or 0.0) for r in points]
        out.append(AccuracyTrend(endpoint=endpoint, loads=loads, judged=[r.judged for r in points],
                                 accuracy=[r.accuracy for r in points],
                                 **trend(loads, [r.correct for r in points], [r.judged for r in points])))
    return out


def accuracy_verdicts(df: pd.DataFrame, slos: Sequence[tuple[int, dict]], endpoints: Sequence[str],
                      regions: Sequence[str]) -> list[SloVerdict]:
    """The accuracy SLOs' verdicts (each `(index, slo)`), one per endpoint × region it names ('*': each graded
    endpoint, each region): PASS where the whole 95% interval of accuracy (over the independent samples the
    time-ordered answers are worth) lies at or above `min` (`minimum`), FAIL where it lies below, else INCONCLUSIVE with the
    graded answers still needed. Judged answers only: truncated, cut and errors are not the model's."""
    at = graded_positions(df)
    grades = strings(df["grade"])[at] if len(at) else np.empty(0, dtype=str)
    judged = np.isin(grades, JUDGED)
    at, grades = at[judged], grades[judged]
    endpoint = strings(df["endpoint"])[at]
    region = strings(df["region"])[at]
    time_column = "t_intended_ref" if "t_intended_ref" in df else "t_intended"
    times = df[time_column].to_numpy()[at]
    graded_endpoints = sorted(set(endpoint) | ({e for e in endpoints} if not len(at) else set()))
    out = []
    for i, slo in slos:
        names = [slo["endpoint"]] if slo["endpoint"] != "*" else graded_endpoints
        places = [slo["region"]] if slo["region"] != "*" else sorted(set(regions) | set(region))
        for e in names:
            for r in places:
                here = (endpoint == e) & (region == r)
                wrong = grades[here][np.argsort(times[here], kind="stable")] != "correct"
                n, k = len(wrong), int(wrong.sum())
                v = proportion_verdict(k, n, 1 - slo["minimum"], tau=integrated_time(wrong) if n > 2 else 1.0)
                out.append(SloVerdict(
                    slo=i, description=f"accuracy ≥ {slo['minimum']:.1%}", metric="accuracy", implicit=False,
                    endpoint=e, region=r, n=n, effective_n=v.effective_n, exceeding=k, verdict=v.verdict,
                    measured=1 - v.observed if n else None, ci_low=1 - v.ci_high if n else None,
                    ci_high=1 - v.ci_low if n else None, more_samples_needed=v.more_samples_needed, trend=None,
                    trend_kind=None, trend_changed_verdict=None, reason=None))
    return out


@dataclass(frozen=True)
class AccuracyResults:
    """A run's graded requests: accuracy by endpoint × region × phase, against offered load, and the accuracy SLOs'
    verdicts (all empty: nothing graded)."""

    rows: list[AccuracyRow] = field(default_factory=list)
    trends: list[AccuracyTrend] = field(default_factory=list)
    verdicts: list[SloVerdict] = field(default_factory=list)
