"""What the analysis of one run produces (`Analysis`), read by the pipeline (analysis/analyze.py) that builds it and
by the report (analysis/report/) that shows it."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from tailrace.analysis.read.clock_correction import OffsetModel
from tailrace.analysis.read.rundir import RunData
from tailrace.analysis.stats.timeline import TokenFigures
from tailrace.contract.summary import RunSummary


@dataclass
class Analysis:
    data: RunData
    requests: pd.DataFrame  # with *_ref columns
    clock_models: dict[str, OffsetModel]
    summary: RunSummary
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    # region → (latency ms, fraction slower): the points of the report's CDF plot (analysis/stats/latency.py)
    cdfs: dict[str, tuple] = field(default_factory=dict)
    # streamed requests' figures: their CDFs and their timeline (analysis/stats/tokens.py)
    token_figures: TokenFigures = field(default_factory=lambda: TokenFigures({}))

