"""What the analysis of one run produces (`Analysis`), read by the pipeline (analysis/analyze.py) that builds it and
by the report (analysis/report/) that shows it."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from tailrace.analysis.read.clock_correction import OffsetModel
from tailrace.analysis.read.rundir import RunData


@dataclass
class Analysis:
    data: RunData
    requests: pd.DataFrame  # with *_ref columns
    clock_models: dict[str, OffsetModel]
    summary: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    # region → (latency ms, fraction slower): the points of the report's CDF plot (analysis/stats/latency.py)
    cdfs: dict[str, tuple] = field(default_factory=dict)
    # streamed requests' figures: "curves" (metric → region → (ms, 1 − CDF)), "timeline" (analysis/stats/tokens.py)
    token_figures: dict = field(default_factory=dict)


def notices(summary: dict) -> list[tuple[str, str]]:
    """What the reader must see before the numbers, as (kind, text): why the run is INVALID, warnings, and
    chunks that could not be read. Kinds: "invalid", "warning", "skipped"."""
    return ([("invalid", reason) for reason in summary["invalid_reasons"]]
            + [("warning", warning) for warning in summary.get("warnings", [])]
            + [("skipped", f"{sk['path']}: {sk['reason']}") for sk in summary["input"]["chunks_skipped"]])
