"""The runs as a history: one catalogue line per run analysed (catalogue.jsonl beside the run directories), and one
metric of one profile's runs in time order with its intervals and the change from each run to the one before."""
from __future__ import annotations

from pydantic import Field

from tailrace.contract.summary.base import Row


class CatalogueEntry(Row):
    """One analysed run, as `tailrace runs` lists it (its summary.json's headline; the whole is in the run)."""

    run: str  # the run directory, relative to the directory of runs that catalogues it
    run_id: str
    profile: str
    start_ns: int | None = None
    verdict: str
    valid: bool
    requests: int = 0
    errors: int = 0
    achieved_rate: float | None = None
    p50_ms: float | None = None  # over every endpoint and region (streams: their E2E where no one-shot request ran)
    p95_ms: float | None = None
    p99_ms: float | None = None
    ttft_p99_ms: float | None = None  # streamed requests, over every endpoint and region
    git_sha: str | None = None
    summary_mtime_ns: int = 0  # the summary.json it was read from: a newer one is read again


class TrendPoint(Row):
    """One run's value of the trended metric, its 95% interval, and the change from the run before: significant
    when the two intervals' normal approximation says p < 0.05 (docs/METHODS.md, "Runs as a history")."""

    run: str
    run_id: str
    start_ns: int | None = None
    git_sha: str | None = None
    verdict: str
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None
    change: float | None = None  # value − the previous run's value
    relative: float | None = None  # change / the previous run's value
    p_value: float | None = None
    significant: bool = False


class Trend(Row):
    """A metric of one profile's runs over time, for one endpoint × region ('*': all of them)."""

    profile: str
    metric: str
    endpoint: str = "*"
    region: str = "*"
    unit: str = "ms"
    points: list[TrendPoint] = Field(default_factory=list)
