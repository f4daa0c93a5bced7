"""What the Python API hands back, typed: a run's result (contract/summary.py's `RunSummary`, the API's `Summary`:
its verdict, latency and token rows, SLO verdicts and every other section of summary.json) and a comparison's rows
(contract/summary/compare.py's `CompareRow`, as compare.json holds them). docs/API.md shows them in use."""
from __future__ import annotations

from dataclasses import dataclass

from tailrace.contract.summary import ALL, Estimate, LatencyRow, SloVerdict, TokenMetric, TokenRow
from tailrace.contract.summary import RunSummary as Summary
from tailrace.contract.summary.compare import CompareRow

__all__ = ["ALL", "CompareRow", "Comparison", "Estimate", "LatencyRow", "SloVerdict", "Summary", "TokenMetric",
           "TokenRow"]


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

        return pd.DataFrame([r.model_dump(mode="json", exclude_unset=True) for r in self.rows])
