"""`tailrace compare`'s result (compare.json, compare.csv, the Python API's `Comparison`): per endpoint × region and
metric, B − A at p50 / p95 / p99 with 95% intervals, the test, the effect size and the verdict."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from tailrace.contract.summary.base import Estimate, Row

COMPARED_PERCENTILES = (50, 95, 99)


class CompareRow(Row):
    """B − A for one endpoint × region and metric (latency, ttft, tpot), in ms. A percentile either run holds too
    few samples for is None throughout (`notes` says why)."""

    endpoint: str
    region: str
    metric: Literal["latency", "ttft", "tpot"] = "latency"
    paired: bool = False  # requests paired by schedule position (paired intervals, Wilcoxon) or independent samples
    n_a: int = 0
    n_b: int = 0
    p50_a_ms: float | None = None
    p50_b_ms: float | None = None
    p50_diff_ms: float | None = None
    p50_ci_low: float | None = None
    p50_ci_high: float | None = None
    p95_a_ms: float | None = None
    p95_b_ms: float | None = None
    p95_diff_ms: float | None = None
    p95_ci_low: float | None = None
    p95_ci_high: float | None = None
    p99_a_ms: float | None = None
    p99_b_ms: float | None = None
    p99_diff_ms: float | None = None
    p99_ci_low: float | None = None
    p99_ci_high: float | None = None
    test: str | None = None
    test_p: float | None = None
    cohens_d: float | None = None
    verdict: str = ""
    notes: list[str] = Field(default_factory=list)

    def difference(self, percentile: float) -> Estimate:
        """B − A at `percentile` (50, 95 or 99) with its interval (empty where too few samples)."""
        p = f"p{percentile:g}"
        return Estimate(value=getattr(self, f"{p}_diff_ms"), ci_low=getattr(self, f"{p}_ci_low"),
                        ci_high=getattr(self, f"{p}_ci_high"))

    def a_ms(self, percentile: float) -> float | None:
        """Run A's own value at `percentile`."""
        return getattr(self, f"p{percentile:g}_a_ms")

    @property
    def differences(self) -> dict[str, Estimate]:
        """"p50", "p95", "p99": B − A in ms with its interval."""
        return {f"p{p}": self.difference(p) for p in COMPARED_PERCENTILES}


class AccuracyDelta(Row):
    """B − A of one graded endpoint's accuracy (judged answers), with its 95% interval: paired on the items both runs
    judged where they drew one schedule, else of independent samples."""

    endpoint: str
    paired: bool = False
    n_a: int = 0
    n_b: int = 0
    items: int | None = None  # paired: the items both judged
    accuracy_a: float | None = None
    accuracy_b: float | None = None
    diff: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    test: str | None = None
    p_value: float | None = None
    verdict: str = ""


class EnergyDelta(Row):
    """B − A of energy per request on one monitor (× endpoint: "*" for the monitor's whole) × measured phase, with
    Welch's 95% interval over each run's equal parts of the phase; `basis` "measured" or "estimate" (labelled)."""

    monitor: str
    endpoint: str = "*"
    phase: int
    basis: Literal["measured", "estimate"]
    mean_a_mj: float | None = None
    mean_b_mj: float | None = None
    diff_mj: float | None = None  # None: fewer than three parts in a run
    ci_low: float | None = None
    ci_high: float | None = None
    windows_a: int = 0
    windows_b: int = 0
    relative: float | None = None  # diff / A's mean
