"""The summary's sections that are not one table: what was read, the scenario's own numbers, the decision between
variants, sessions and the prefix cache, pipelines, and the manifest's account of the run."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from tailrace.contract.summary.base import Estimate, Row, TokenMetric


class SkippedChunk(Row):
    path: str
    reason: str


class InputRead(Row):
    rows_read: int
    chunks_read: int
    chunks_skipped: list[SkippedChunk] = Field(default_factory=list)


class ScenarioPercentile(Row):
    """Single-stream's p90 or multi-stream's p99 per query, per endpoint × region."""

    endpoint: str
    region: str
    queries: int
    errors: int
    p90_ms: float | None = None
    p99_ms: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    note: str | None = None


class MissedIntervals(Row):
    intervals: int
    missed: int
    missed_fraction: float | None = None


class OfflineRegion(Row):
    region: str
    samples_per_s: float
    batches: int
    p50_batch_ms: float | None = None


class Scenario(Row):
    """The scenario's own numbers, MLPerf-style: server (open loop) its arrivals; single-stream its p90 and requests
    in flight; multi-stream its p99 per query and missed intervals; offline its samples/s."""

    scenario: str
    arrivals: str | None = None
    p90: list[ScenarioPercentile] | None = None
    max_in_flight_per_region: dict[str, int] | None = None
    queries_per_s: float | None = None
    p99: list[ScenarioPercentile] | None = None
    intervals: dict[str, MissedIntervals] | None = None
    interval_ms: float | None = None
    samples_per_query: int | None = None
    samples_per_s: float | None = None
    batches_per_s: float | None = None
    per_region: list[OfflineRegion] | None = None
    accuracy: float | None = None
    batch: int | None = None
    concurrency_per_worker: int | None = None


class VariantRow(Row):
    """One variant of a `[decision]`: what it measured, its constraints, dominance and rank."""

    name: str
    model: str | None = None
    protocol: str | None = None
    requests: int = 0
    errors: int = 0
    samples: int | None = None
    correct: int | None = None
    accuracy: float | None = None
    build_accuracy: float | None = None
    p50_ms: float | None = None
    p50_ci: list[float | None] | None = None
    p95_ms: float | None = None
    p95_ci: list[float | None] | None = None
    p99_ms: float | None = None
    p99_ci: list[float | None] | None = None
    mean_compute_ms: float | None = None
    memory_mb: float | None = None
    memory_shared_with: list[str] = Field(default_factory=list)
    model_size_bytes: int | None = None
    parameters: int | None = None
    capacity_rps: float | None = None
    capacity_source: str | None = None
    output_tokens_per_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p50_ci: list[float | None] | None = None
    ttft_p95_ms: float | None = None
    ttft_p95_ci: list[float | None] | None = None
    tpot_p50_ms: float | None = None
    tpot_p50_ci: list[float | None] | None = None
    tpot_p95_ms: float | None = None
    tpot_p95_ci: list[float | None] | None = None
    constraint_failures: list[str] = Field(default_factory=list)
    dominated_latency_accuracy_by: list[str] = Field(default_factory=list)
    dominated_memory_capacity_by: list[str] = Field(default_factory=list)
    dominated_ttft_throughput_by: list[str] = Field(default_factory=list)
    dominated_latency_energy_by: list[str] = Field(default_factory=list)
    energy_mj: float | None = None  # per request, over the measured phases ([[monitors]])
    energy_basis: str | None = None  # "measured", "estimate: process CPU" or "estimate: model CPU" (one is ranked)
    estimated_energy_mj: float | None = None  # energy on a basis the ranking does not use (see energy_basis)
    exporter_memory_mb: float | None = None  # the most memory a monitor of this variant alone saw
    memory_source: str | None = None
    survives: bool = True
    score: float | None = None
    rank: int | None = None
    serving_overhead_p50_ms: float | None = None  # its p50 − the baseline's (the same model, in-process)
    model_share_of_p50: float | None = None
    distinct_samples: int | None = None
    accuracy_distinct: float | None = None


class PairwiseTest(Row):
    a: str
    b: str
    p95_diff_ms: float | None = None
    mann_whitney_p: float | None = None
    cohens_d: float | None = None
    latency_significant: bool = False
    ttft_p95_diff_ms: float | None = None
    ttft_mann_whitney_p: float | None = None
    ttft_significant: bool = False
    tpot_p95_diff_ms: float | None = None
    tpot_mann_whitney_p: float | None = None
    tpot_significant: bool = False
    accuracy_diff: float | None = None
    accuracy_p: float | None = None
    accuracy_test: str | None = None
    accuracy_significant: bool = False


class Decision(Row):
    """The `[decision]` between variants: weights, constraints, each variant, the ranking and the tests."""

    weights: dict[str, float] = Field(default_factory=dict)
    constraints: dict[str, float | None] = Field(default_factory=dict)
    variants: list[VariantRow] = Field(default_factory=list)
    ranking: list[str] = Field(default_factory=list)
    recommended: str | None = None
    pairwise: list[PairwiseTest] = Field(default_factory=list)
    caveats: list[str] = Field(default_factory=list)
    baseline: VariantRow | None = None  # the model in-process, without a network: its own cost


class TurnRow(Row):
    endpoint: str
    turn: str
    requests: int
    ok: int
    prompt_tokens_mean: float | None = None
    cached_tokens_mean: float | None = None
    hit_ratio: float | None = None
    ttft_p50: Estimate | None = None
    ttft_p99: Estimate | None = None
    e2e_p50: Estimate | None = None
    e2e_p99: Estimate | None = None


class SessionRow(Row):
    endpoint: str
    sessions: int
    turns_sent: int
    turns_mean: float | None = None
    turns_max: int | None = None
    good_sessions: int | None = None
    session_goodput_rps: float | None = None
    duration_p50_s: float | None = None
    duration_p95_s: float | None = None
    still_running: int = 0
    ended: dict[str, int] = Field(default_factory=dict)


class PrefixCacheRow(Row):
    endpoint: str
    server_hit_ratio: float | None = None
    server_queries: float | None = None
    server_metric: str | None = None
    usage_hit_ratio: float | None = None
    requests_reporting: int = 0
    ideal_hit_ratio: float | None = None
    prompt_tokens: int = 0


class SessionsInFlight(Row):
    """Per second since `t0_ns` (the first intended send, reference time): sessions in flight, per endpoint."""

    t0_ns: int = 0
    in_flight: dict[str, list[float]] = Field(default_factory=dict)


class HitRatioLines(Row):
    """One endpoint's prefix-cache hit ratio per bin: the requests' usage, the ideal of an unbounded cache (None where
    nothing said), and the server's own counters between its scrapes ((seconds since t0, ratio) points)."""

    usage: list[float | None] | None = None
    ideal: list[float | None] | None = None
    server: list[tuple[float, float]] | None = None


class HitRatioOverTime(Row):
    """The prefix-cache hit ratio per `bin_s` bin of intended send since `t0_ns`, per endpoint."""

    bin_s: float = 5.0
    t0_ns: int = 0
    by_endpoint: dict[str, HitRatioLines] = Field(default_factory=dict)


class Sessions(Row):
    """Sessions and prefix caching: by turn, per endpoint, sessions in flight and the cache's hits over time."""

    turns: list[TurnRow] = Field(default_factory=list)
    sessions: list[SessionRow] = Field(default_factory=list)
    in_flight: SessionsInFlight = Field(default_factory=SessionsInFlight)  # (empty: no sessions)
    prefix_cache: list[PrefixCacheRow] = Field(default_factory=list)
    hit_ratio_over_time: HitRatioOverTime = Field(default_factory=HitRatioOverTime)  # (empty: nothing said)


class StageRow(Row):
    """One stage of a pipeline: its requests, latency from its own intended send (ok requests), its share of the
    pipelines' mean end-to-end time."""

    stage: int  # 1..
    endpoint: str
    requests: int
    errors: int
    latency_ms: TokenMetric = Field(default_factory=TokenMetric)
    send_lag_p99_ms: float | None = None
    share_of_e2e: float | None = None


class PipelineRow(Row):
    """A pipeline × region ('*': over every region): how its measured pipelines ended, end to end and to the
    answer's first token (from the arrival's intended send), goodput under the pipeline SLOs, and by stage."""

    pipeline: str
    region: str
    started: int
    done: int
    failed: int
    run_end: int = 0  # its next stage would have been due after the run's window
    incomplete: int = 0  # its records stop before an end (a worker lost)
    pipelines_per_s: float | None = None
    goodput_per_s: float | None = None
    e2e_ms: TokenMetric = Field(default_factory=TokenMetric)
    ttft_ms: TokenMetric = Field(default_factory=TokenMetric)
    stages: list[StageRow] = Field(default_factory=list)


class PipelineFailure(Row):
    pipeline: str
    stage: int
    endpoint: str
    status: str
    code: str
    count: int
    example_error: str = ""


class SlowStage(Row):
    stage: int
    endpoint: str
    latency_ms: float
    wait_ms: float  # from the stage before's end to this stage's intended send: its declared pause
    send_lag_ms: float
    trace_id: str = ""


class SlowPipeline(Row):
    """One of the slowest pipelines: end to end, each stage, and the stage its time went to."""

    pipeline: str
    region: str
    e2e_ms: float
    ttft_ms: float | None = None
    slowest_stage: int
    slowest_endpoint: str
    slowest_share: float
    stages: list[SlowStage] = Field(default_factory=list)


class Pipelines(Row):
    """Pipelines across endpoints: per pipeline × region, failures by stage, the slowest pipelines."""

    pipelines: list[PipelineRow] = Field(default_factory=list)
    failures: list[PipelineFailure] = Field(default_factory=list)
    slowest: list[SlowPipeline] = Field(default_factory=list)

    def row(self, pipeline: str, region: str = "*") -> PipelineRow:
        """The row of a pipeline × region ('*': over every region); KeyError names the rows there are."""
        for r in self.pipelines:
            if r.pipeline == pipeline and r.region == region:
                return r
        raise KeyError(f"no pipelines row for {pipeline!r}, region {region!r}; the rows are "
                       f"{sorted((r.pipeline, r.region) for r in self.pipelines)}")


class HostCpu(Row):
    """How busy the generators' host was over the run, and how much of its time the hypervisor took (steal)."""

    busy_fraction: float | None = None
    steal_fraction: float | None = None


class ManifestExcerpt(Row):
    """What the run's manifest said of itself: versions, host, seed, commit, its span and each worker's end."""

    versions: dict[str, str | None] | None = None
    host: dict[str, Any] | None = None
    seed: int | None = None
    git_sha: str | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    valid: bool | None = None
    invalid_reasons: list[str] | None = None
    warnings: list[str] | None = None
    host_cpu: HostCpu | None = None
    workers: dict[str, dict[str, Any]] | None = None
    overrides: list[str] | None = None  # the profile fields set for this run (--set, TAILRACE_SET_*, a sweep's point)
