"""What the Python API hands back, typed: a run's verdict, its latency and token rows, its SLO verdicts, and a
comparison's rows. Each is read from summary.json's content (or compare's rows) once; `.raw` keeps the dict, for
JSON. docs/API.md shows them in use."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

ALL = "*"  # the row over every endpoint or every region


@dataclass(frozen=True)
class Estimate:
    """A statistic in ms with its 95% interval; `value` is None where the run holds too few samples for it, and the
    interval None where the samples are worth too few independent ones (`note` says which)."""

    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    note: str | None = None

    @classmethod
    def of(cls, d: Mapping[str, Any] | None) -> "Estimate":
        d = d or {}
        return cls(d.get("value"), d.get("ci_low"), d.get("ci_high"), d.get("note"))

    def __str__(self) -> str:
        if self.value is None:
            return "—"
        ci = f" [{self.ci_low:.2f}, {self.ci_high:.2f}]" if self.ci_low is not None and self.ci_high is not None else ""
        return f"{self.value:.2f} ms{ci}"


@dataclass(frozen=True)
class LatencyRow:
    """One row of the latency table: an endpoint × region (ALL for every one), requests of one kind."""

    endpoint: str
    region: str
    kind: str  # "one-shot" or "stream": a row never pools the two
    count: int
    errors: int
    error_rate: float
    achieved_rate: float
    goodput_rps: float | None
    send_lag_p99_ms: float | None
    percentiles: dict[str, Estimate]  # "p50", "p90", "p95", "p99", "p99.9"
    raw: dict = field(repr=False, compare=False)

    @property
    def p50(self) -> Estimate:
        return self.percentiles["p50"]

    @property
    def p95(self) -> Estimate:
        return self.percentiles["p95"]

    @property
    def p99(self) -> Estimate:
        return self.percentiles["p99"]

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> "LatencyRow":
        return cls(d["endpoint"], d["region"], d.get("kind", "one-shot"), d["count"], d["errors"], d["error_rate"],
                   d["achieved_rate"], d.get("goodput_rps"), d.get("send_lag_p99_ms"),
                   {p: Estimate.of(e) for p, e in d["percentiles"].items()}, dict(d))


@dataclass(frozen=True)
class TokenRow:
    """One row of the tokens table (streamed endpoints): TTFT, TPOT, ITL and E2E with intervals, and throughput."""

    endpoint: str
    region: str
    requests: int
    ok: int
    output_tokens: int
    output_tokens_per_s: float
    goodput_rps: float | None
    ttft: dict[str, Estimate]  # "p50", "p90", "p99"
    tpot: dict[str, Estimate]
    itl: dict[str, Estimate]
    e2e: dict[str, Estimate]
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> "TokenRow":
        def estimates(key: str) -> dict[str, Estimate]:
            return {p: Estimate.of(e) for p, e in (d.get(key) or {}).items() if isinstance(e, Mapping)}

        return cls(d["endpoint"], d["region"], d["requests"], d["ok"], d["output_tokens"], d["output_tokens_per_s"],
                   d.get("goodput_rps"), estimates("ttft_ms"), estimates("tpot_ms"), estimates("itl_ms"),
                   estimates("e2e_ms"), dict(d))


@dataclass(frozen=True)
class SloVerdict:
    """One SLO judged on one endpoint × region: PASS, FAIL or INCONCLUSIVE, with what was measured."""

    description: str
    metric: str
    endpoint: str
    region: str
    verdict: str
    measured: float | None
    ci_low: float | None
    ci_high: float | None
    implicit: bool  # the error-rate SLO a profile gets when it declares none
    reason: str | None
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> "SloVerdict":
        return cls(d["description"], d["metric"], d["endpoint"], d["region"], d["verdict"], d.get("measured"),
                   d.get("ci_low"), d.get("ci_high"), bool(d.get("implicit")), d.get("reason"), dict(d))


class Summary(Mapping):
    """summary.json's content, typed where a user reads it — and still the dict (`summary["latency"]`, `.raw`)."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = dict(raw)
        self.latency = [LatencyRow.of(r) for r in raw.get("latency") or []]
        self.tokens = [TokenRow.of(r) for r in raw.get("tokens") or []]
        self.slos = [SloVerdict.of(r) for r in raw.get("slos") or []]

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    @property
    def verdict(self) -> str:
        return self.raw["verdict"]

    @property
    def exit_code(self) -> int:
        return self.raw["exit_code"]

    @property
    def valid(self) -> bool:
        return bool(self.raw["valid"])

    @property
    def invalid_reasons(self) -> list[str]:
        return list(self.raw.get("invalid_reasons") or [])

    def latency_row(self, endpoint: str = ALL, region: str = ALL, kind: str | None = None) -> LatencyRow:
        """The latency row of an endpoint × region (ALL: over every one); `kind` picks a mixed run's pooled row
        ("one-shot" or "stream"). KeyError names what there is when no row matches."""
        rows = [r for r in self.latency if (r.endpoint == endpoint or (endpoint == ALL and r.endpoint.startswith(ALL)))
                and r.region == region and (kind is None or r.kind == kind)]
        if not rows:
            have = sorted({(r.endpoint, r.region) for r in self.latency})
            raise KeyError(f"no latency row for endpoint {endpoint!r}, region {region!r}"
                           + (f", kind {kind!r}" if kind else "") + f"; the rows are {have}")
        return rows[0]

    def token_row(self, endpoint: str = ALL, region: str = ALL) -> TokenRow:
        for r in self.tokens:
            if r.endpoint == endpoint and r.region == region:
                return r
        raise KeyError(f"no tokens row for endpoint {endpoint!r}, region {region!r} (streamed endpoints have one)")

    def failing(self) -> list[SloVerdict]:
        """The SLO verdicts that are not PASS."""
        return [s for s in self.slos if s.verdict != "PASS"]


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
        diffs = {f"p{p}": Estimate(d.get(f"p{p}_diff_ms"), d.get(f"p{p}_ci_low"), d.get(f"p{p}_ci_high"))
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
