"""The runs as a history: one catalogue line per run analysed (contract/layout.py's HistoryLayout), and one
metric of one profile's runs in time order with its intervals and the change from each run to the one before."""
from __future__ import annotations

from pathlib import Path

import orjson
from pydantic import Field, ValidationError

from tailrace.contract.summary.base import READING, Row, SummaryError
from tailrace.contract.summary.sections import InputRead, ManifestExcerpt
from tailrace.contract.summary.tables import LatencyRow, TokenRow, first_latency_row

HEADLINE_VERSIONS = (1, 2)  # the summary versions whose headline reads (RunSummary's READABLE_VERSIONS)


class SummaryHeadline(Row):
    """What the runs' history reads of a summary.json — who, when, its verdict, its latency and tokens tables —
    validated alone (a whole summary's validation costs ~10× more: a history of a thousand runs reads a thousand)."""

    run_id: str
    profile: str
    verdict: str
    valid: bool = True
    latency: list[LatencyRow] = Field(default_factory=list)
    tokens: list[TokenRow] = Field(default_factory=list)
    manifest: ManifestExcerpt = Field(default_factory=ManifestExcerpt)
    input: InputRead | None = None

    @classmethod
    def read(cls, path: Path) -> "SummaryHeadline":
        """A summary.json's headline; SummaryError names the file and what is wrong (OSError: it cannot be read)."""
        try:
            raw = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise SummaryError(f"{path}: not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise SummaryError(f"{path}: not a JSON object")
        if raw.get("summary_version", 1) not in HEADLINE_VERSIONS:
            raise SummaryError(f"{path}: summary_version {raw.get('summary_version')!r} is not one this tailrace "
                               "reads; analyse the run again")
        try:
            return cls.model_validate({k: raw[k] for k in cls.model_fields if k in raw}, context=READING)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise SummaryError(f"{path}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None

    def latency_row(self, endpoint: str = "*", region: str = "*") -> LatencyRow | None:
        """The latency row of an endpoint × region ("*": over every one; None: none)."""
        return first_latency_row(self.latency, endpoint, region)

    def overall_tokens(self) -> TokenRow | None:
        """The tokens row over every endpoint and region (None: no streams)."""
        return next((r for r in self.tokens if r.endpoint == "*" and r.region == "*"), None)


class CatalogueEntry(Row):
    """One analysed run, as `tailrace runs` lists it (its summary.json's headline; the whole is in the run)."""

    run: str  # the run directory's absolute path (the catalogue's key)
    run_id: str
    profile: str
    start_ns: int | None = None
    verdict: str
    valid: bool
    requests: int = 0  # every request the run recorded, warm-up included (the run's own headline)
    errors: int = 0  # failed requests of the measured phases, every endpoint
    achieved_rate: float | None = None  # requests/s of the measured phases, every endpoint
    p50_ms: float | None = None  # the latency table's row over every endpoint and region: its one-shot requests
    # where the run has any (a stream's E2E is not pooled with them), else the streams' E2E
    p95_ms: float | None = None
    p99_ms: float | None = None
    ttft_p99_ms: float | None = None  # streamed requests, over every endpoint and region
    git_sha: str | None = None
    overrides: list[str] = Field(default_factory=list)  # the profile fields set for the run (--set, a sweep's point)
    summary_mtime_ns: int = 0  # the summary.json it was read from: a newer one is read again


class TrendPoint(Row):
    """One run's value of the trended metric, its 95% interval, and the change from the run before: significant
    when the two intervals' normal approximation says p < 0.05 (docs/METHODS.md, "Runs as a history")."""

    run: str  # the run directory
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
    overrides: list[str] = Field(default_factory=list)  # the profile fields set for the run
    settings_changed: list[str] = Field(default_factory=list)  # its overrides that the run before did not have: no
    # change is judged across them (another load or configuration, not another build)


class Trend(Row):
    """A metric of one profile's runs over time, for one endpoint × region ('*': all of them)."""

    profile: str
    metric: str
    endpoint: str = "*"
    region: str = "*"
    unit: str = "ms"
    points: list[TrendPoint] = Field(default_factory=list)
