"""Graded answers in the summary: accuracy per endpoint × region × phase with its exact interval, and accuracy
against offered load with its trend (analysis/stats/outcomes/accuracy.py computes them; docs/METHODS.md, "Accuracy under
load")."""
from __future__ import annotations

from tailrace.contract.summary.base import Row


class AccuracyRow(Row):
    """One endpoint × region × phase's graded requests (region "*": over its regions; phase 0: every measured
    phase). accuracy = correct / judged, judged = correct + wrong + unparsable (the model's answers); truncated, cut,
    error and grader_error are counted apart, never as the model's mistakes."""

    endpoint: str
    region: str
    phase: int
    offered_rps: float | None = None  # the phase's intended rate over every endpoint (None: no rate, or phase 0)
    graded: int
    judged: int
    correct: int
    wrong: int
    unparsable: int
    truncated: int
    cut: int
    error: int
    grader_error: int
    accuracy: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    correct_goodput_rps: float | None = None  # on time for every SLO that applies and correct, per second (phase 0)


class AccuracyTrend(Row):
    """Does an endpoint's accuracy fall as offered load rises? Across its phases (or a sweep's points) by offered
    load: the change in accuracy per request/s (a line through the loads, weighted by what each judged) with its 95%
    interval, the Cochran–Armitage test's two-sided p-value, and accuracy at the lowest and the highest load."""

    endpoint: str
    loads: list[float]
    judged: list[int]
    accuracy: list[float | None]
    slope_per_rps: float | None = None
    slope_ci_low: float | None = None
    slope_ci_high: float | None = None
    p_value: float | None = None
    change: float | None = None  # accuracy at the highest load − at the lowest
    verdict: str = "not tested"  # falls | rises | holds (no significant trend) | not tested (fewer than two loads)
