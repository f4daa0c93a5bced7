"""What the Python API hands back, typed: a run's result (contract/summary.py's `RunSummary`, the API's `Summary`:
its verdict, latency and token rows, SLO verdicts and every other section of summary.json) and a comparison's rows
(read from compare's rows once; `.raw` keeps the dict, for JSON). docs/API.md shows them in use."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailrace.contract.summary import ALL, Estimate, LatencyRow, SloVerdict, TokenMetric, TokenRow
from tailrace.contract.summary import RunSummary as Summary

__all__ = ["ALL", "CompareRow", "Comparison", "Estimate", "LatencyRow", "SloVerdict", "Summary", "TokenMetric",
           "TokenRow"]


@dataclass(frozen=True)
class CompareRow:
    """B − A for one endpoint × region and metric (latency, ttft, tpot): percentile differences with 95% intervals,
    the test, the effect size and the verdict."""

    endpoint: str
    region: str
    metric: str
    paired: bool
    n_a: int
    n_b: int
    differences: dict[str, Estimate]  # "p50", "p95", "p99": B − A in ms
    test: str | None
    test_p: float | None
    cohens_d: float | None
    verdict: str
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> "CompareRow":
        diffs = {f"p{p}": Estimate(value=d.get(f"p{p}_diff_ms"), ci_low=d.get(f"p{p}_ci_low"), ci_high=d.get(f"p{p}_ci_high"))
                 for p in (50, 95, 99)}
        return cls(d["endpoint"], d["region"], d.get("metric", "latency"), bool(d.get("paired")), d.get("n_a", 0),
                   d.get("n_b", 0), diffs, d.get("test"), d.get("test_p"), d.get("cohens_d"), d.get("verdict", ""),
                   dict(d))


@dataclass(frozen=True)
class Comparison:
    """`api.compare`'s answer: its rows, why either run is INVALID (each reason naming run A or B), and the same
    rows as a DataFrame (`table()`)."""

    rows: list[CompareRow]
    invalid_reasons: list[str]

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons

    def row(self, endpoint: str, region: str, metric: str = "latency") -> CompareRow:
        for r in self.rows:
            if (r.endpoint, r.region, r.metric) == (endpoint, region, metric):
                return r
        raise KeyError(f"no comparison row for {endpoint!r} × {region!r} ({metric})")

    def table(self):
        import pandas as pd

        return pd.DataFrame([r.raw for r in self.rows])
