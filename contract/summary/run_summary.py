"""One run's result, typed: what `tailrace analyze` computes (analysis/analyze.py builds it), writes as
report/summary.json (its serialisation: `RunSummary.to_json`) and what everything downstream reads — the report,
compare, capacity, variants, the live page's end state, the JUnit writer and the Python API.

Milliseconds are floats named `*_ms`; instants are epoch nanoseconds on the reference clock (`*_ns`). A statistic
the run holds too few samples for is None, never 0. `summary_version` 2 is this schema (docs/summary.schema.json,
generated from these models); a version-1 file has the same keys and reads unchanged, and a key it lacks takes its
default. Every row keeps keys these models do not declare (a newer writer's), so nothing read is lost.
"""
from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from tailrace.contract.summary.accuracy import AccuracyRow, AccuracyTrend
from tailrace.contract.summary.base import ALL, READING, Row, SummaryError
from tailrace.contract.summary.sections import Decision, InputRead, ManifestExcerpt, Pipelines, Scenario, Sessions
from tailrace.contract.summary.tables import (
    ArrivalProcessRow,
    ArrivalsRow,
    CancellationRow,
    ClockRow,
    ColdStart,
    EmbeddingRow,
    EndpointStatistics,
    ErrorRow,
    Hardware,
    LatencyLegs,
    LatencyRow,
    Outage,
    PhaseRow,
    QueueingRow,
    ServerSpans,
    ServerTimelinePoint,
    SloVerdict,
    SlowRequest,
    TokenRow,
    TtftLegs,
    ValidityRow,
    first_latency_row,
)

SUMMARY_VERSION = 2
READABLE_VERSIONS = (1, 2)


class RunSummary(Row):
    """One run's result (report/summary.json)."""

    summary_version: int = SUMMARY_VERSION
    run_id: str
    profile: str
    verdict: Literal["PASS", "FAIL", "INCONCLUSIVE", "INVALID"]
    exit_code: int
    valid: bool
    invalid_reasons: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    input: InputRead
    duration_s: float
    scenario: Scenario
    slos: list[SloVerdict] = Field(default_factory=list)
    latency: list[LatencyRow] = Field(default_factory=list)
    phases: list[PhaseRow] = Field(default_factory=list)
    decomposition: list[LatencyLegs] = Field(default_factory=list)
    queueing: list[QueueingRow] = Field(default_factory=list)
    arrivals: list[ArrivalsRow] = Field(default_factory=list)
    arrival_process: list[ArrivalProcessRow] = Field(default_factory=list)
    validity: list[ValidityRow] = Field(default_factory=list)
    clock: list[ClockRow] = Field(default_factory=list)
    errors: list[ErrorRow] = Field(default_factory=list)
    slowest: list[SlowRequest] = Field(default_factory=list)
    endpoint_statistics: list[EndpointStatistics] = Field(default_factory=list)
    server_timeline: dict[str, list[ServerTimelinePoint]] = Field(default_factory=dict)
    outages: list[Outage] = Field(default_factory=list)
    decision: Decision | None = None
    cold_start: list[ColdStart] = Field(default_factory=list)
    tokens: list[TokenRow] = Field(default_factory=list)
    tokens_by_model: list[TokenRow] = Field(default_factory=list)  # endpoints with a model mix, per model
    embeddings: list[EmbeddingRow] = Field(default_factory=list)
    rerank: list[EmbeddingRow] = Field(default_factory=list)  # inputs: the documents a request carried
    ttft_decomposition: list[TtftLegs] = Field(default_factory=list)
    sessions: Sessions | None = None
    pipelines: Pipelines | None = None
    cancellations: list[CancellationRow] = Field(default_factory=list)
    accuracy: list[AccuracyRow] = Field(default_factory=list)  # graded requests (prompts.graded)
    accuracy_trends: list[AccuracyTrend] = Field(default_factory=list)  # accuracy against offered load
    hardware: Hardware | None = None
    server_spans: ServerSpans | None = None
    manifest: ManifestExcerpt = Field(default_factory=ManifestExcerpt)

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "the summary") -> RunSummary:
        """A summary.json's content; SummaryError names `source` and the first field that is wrong."""
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise SummaryError(f"{source}: not JSON ({exc})") from None
        return cls.of(raw, source)

    @classmethod
    def assemble(cls, **sections: Any) -> RunSummary:
        """The summary the analysis writes, section by section from its statistics' results (their rows, or the
        dicts of those not typed yet): every key of every row declared (a key the models do not declare raises
        pydantic's ValidationError, naming it)."""
        return cls(**sections)

    @classmethod
    def of(cls, raw: Any, source: str = "the summary") -> RunSummary:
        """A summary as a dict (summary.json parsed, or as the analysis assembles it)."""
        if not isinstance(raw, dict):
            raise SummaryError(f"{source}: not a JSON object")
        version = raw.get("summary_version", 1)
        if version not in READABLE_VERSIONS:
            raise SummaryError(f"{source}: summary_version {version!r} is not one this tailrace reads "
                               f"({', '.join(map(str, READABLE_VERSIONS))}); analyse the run again")
        from pydantic import ValidationError

        try:
            return cls.model_validate(raw, context=READING)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise SummaryError(f"{source}: {where}: {first['msg']}") from None

    def to_json(self) -> str:
        """summary.json's text: the fields it was made with (a key the analysis leaves out stays out)."""
        return self.model_dump_json(indent=2, exclude_unset=True)

    def to_dict(self) -> dict[str, Any]:
        """The summary as plain JSON values (what summary.json holds)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def latency_row(self, endpoint: str = ALL, region: str = ALL, kind: str | None = None) -> LatencyRow:
        """The latency row of an endpoint × region (ALL: over every one); `kind` picks a mixed run's pooled row
        ("one-shot" or "stream"). KeyError names what there is when no row matches."""
        row = first_latency_row(self.latency, endpoint, region, kind)
        if row is None:
            have = sorted({(r.endpoint, r.region) for r in self.latency})
            raise KeyError(f"no latency row for endpoint {endpoint!r}, region {region!r}"
                           + (f", kind {kind!r}" if kind else "") + f"; the rows are {have}")
        return row

    def token_row(self, endpoint: str = ALL, region: str = ALL) -> TokenRow:
        """The tokens row of a streamed endpoint × region (ALL: over every one)."""
        for r in self.tokens:
            if r.endpoint == endpoint and r.region == region:
                return r
        raise KeyError(f"no tokens row for endpoint {endpoint!r}, region {region!r} (streamed endpoints have one)")

    def embedding_row(self, endpoint: str, region: str = ALL) -> EmbeddingRow:
        """The embeddings (or rerank) row of a pooling endpoint × region (ALL: over its regions, where it has
        several; else its one region's)."""
        rows = [r for r in (*self.embeddings, *self.rerank) if r.endpoint == endpoint]
        for r in rows:
            if r.region == region:
                return r
        if region == ALL and len(rows) == 1:
            return rows[0]
        raise KeyError(f"no embeddings or rerank row for endpoint {endpoint!r}, region {region!r} "
                       "(openai-embeddings and rerank endpoints have one)")

    def inputs_per_s(self) -> float | None:
        """The texts and documents the embeddings and rerank endpoints' ok requests carried per second, each endpoint
        counted once over its regions (None: the run has no such endpoint)."""
        pooled = [*self.embeddings, *self.rerank]
        per_endpoint = [r.inputs_per_s for r in pooled if r.region == ALL or not any(
            o.region == ALL for o in pooled if o.endpoint == r.endpoint)]
        return sum(v or 0.0 for v in per_endpoint) if per_endpoint else None

    def overall_tokens(self) -> TokenRow | None:
        """The tokens row over every endpoint and region (None: no streams)."""
        return next((r for r in self.tokens if r.endpoint == ALL and r.region == ALL), None)

    def failing(self) -> list[SloVerdict]:
        """The SLO verdicts that are not PASS."""
        return [s for s in self.slos if s.verdict != "PASS"]

    def notices(self) -> list[tuple[str, str]]:
        """What the reader must see before the numbers, as (kind, text): why the run is INVALID, warnings, and
        chunks that could not be read. Kinds: "invalid", "warning", "skipped"."""
        return ([("invalid", reason) for reason in self.invalid_reasons]
                + [("warning", warning) for warning in self.warnings]
                + [("skipped", f"{sk.path}: {sk.reason}") for sk in self.input.chunks_skipped])


def summary_schema() -> dict[str, Any]:
    """The JSON Schema of summary.json (docs/summary.schema.json is this: `python -m tailrace.contract.summary`)."""
    schema = RunSummary.model_json_schema()
    schema["$id"] = f"https://tailrace.dev/schema/summary-v{SUMMARY_VERSION}.json"
    return schema

