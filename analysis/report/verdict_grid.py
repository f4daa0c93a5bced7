"""The SLO verdicts at a glance: one row per SLO and endpoint (or pipeline), one column per region and `*`, each
cell its verdict with the measured value. The terminal and the report open with it; the long list of verdicts,
with their intervals and reasons, follows below it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailrace.contract.summary import SloVerdict

ALL = "*"
_SEVERITY = {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}


SHARES = ("error_rate", "accuracy")  # SLO metrics that are shares of the requests, not times


def measured_words(v: SloVerdict) -> str:
    """The measured value in its unit: ms for a latency, a percentage for an error rate or accuracy ('–' when
    none)."""
    if v.measured is None:
        return "–"
    if v.metric in SHARES:
        return f"{v.measured:.2%}"
    if v.measured == float("inf"):
        return "∞ ms"
    return f"{v.measured:.3g} ms"


@dataclass
class GridRow:
    """One SLO on one endpoint (or pipeline, or one model of an endpoint's mix) across the regions."""

    description: str
    endpoint: str
    cells: dict[str, SloVerdict] = field(default_factory=dict)  # region → verdict ('*' where judged pooled)

    @property
    def worst(self) -> str:
        """The row's verdict over every region: FAIL, else INCONCLUSIVE, else PASS."""
        return max((c.verdict for c in self.cells.values()), key=lambda v: _SEVERITY.get(v, 1), default="PASS")

    def cell(self, region: str) -> str:
        """'PASS 43.4 ms', '' where the SLO does not apply to that region; '*' is the row's worst verdict where no
        verdict was judged over every region at once."""
        v = self.cells.get(region)
        if v is not None:
            return f"{v.verdict} {measured_words(v)}"
        if region == ALL and self.cells:
            bad = [c for c in self.cells.values() if c.verdict == self.worst]
            return self.worst if self.worst == "PASS" else f"{self.worst} ({len(bad)} of {len(self.cells)})"
        return ""


def verdict_grid(slos: list[SloVerdict]) -> tuple[list[str], list[GridRow]]:
    """(the region columns, '*' last; the rows in the profile's order of SLOs)."""
    rows: dict[tuple[int, str, str, str], GridRow] = {}
    regions: list[str] = []
    for v in slos:
        endpoint = v.endpoint if v.model is None else f"{v.endpoint} · {v.model}"
        key = (v.slo, v.description, v.metric, endpoint)
        row = rows.setdefault(key, GridRow(v.description, endpoint))
        row.cells[v.region] = v
        if v.region != ALL and v.region not in regions:
            regions.append(v.region)
    return [*regions, ALL], list(rows.values())


def not_passing(slos: list[SloVerdict]) -> list[SloVerdict]:
    """The verdicts that are not PASS, FAIL first."""
    return sorted((v for v in slos if v.verdict != "PASS"), key=lambda v: -_SEVERITY.get(v.verdict, 1))


def why_words(v: SloVerdict) -> str:
    """One verdict that is not PASS in a line: the SLO, where, the measured value and why."""
    where = " · ".join(p for p in (v.description, v.endpoint, v.region) if p)
    interval = "" if v.ci_low is None or v.ci_high is None or v.metric == "error_rate" else (
        f" [{v.ci_low:.1%}, {v.ci_high:.1%}]" if v.metric in SHARES else f" [{v.ci_low:.3g}, {v.ci_high:.3g}]")
    if v.verdict == "FAIL":
        side = "under its minimum" if v.metric == "accuracy" else "over the threshold"
        why = f"its interval lies {side}" + (f"; {v.reason}" if v.reason else "")
    else:
        why = v.reason or (f"{v.more_samples_needed:,} more samples would decide it" if v.more_samples_needed
                           else "its interval straddles the threshold")
    return f"{where}: {v.verdict}, measured {measured_words(v)}{interval} — {why}"
