"""What the report's figures leave out, shared by the figure process (plots.py) and the page (html.py). Only the
standard library is imported here: the figure process imports this at its start, beside matplotlib, while the
analysis computes on the same cores (docs/DECISIONS.md "The figure process imports only what it draws with")."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailrace.contract.summary.tables import LatencyRow

MIN_UTILIZATION_TO_PLOT = 0.1  # below this on every endpoint, the queue-vs-utilization figure draws nothing


def heatmap_rows(latency_rows: Sequence[LatencyRow]) -> list[LatencyRow]:
    """The latency rows the p99 heatmap draws: each region × endpoint, of one kind of endpoint (a mixed run's
    one-shot ones: a stream's E2E would wash their differences out)."""
    rows = [r for r in latency_rows if r.endpoint != "*" and r.region != "*"]
    if {r.kind for r in rows} >= {"one-shot", "stream"}:
        rows = [r for r in rows if r.kind == "one-shot"]
    return rows
