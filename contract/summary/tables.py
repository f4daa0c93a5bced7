"""The summary's tables, one row per endpoint × region (or server, phase, worker, request): latency, tokens, SLO
verdicts, phases, where the time went, queueing, arrivals, validity, clocks, errors, the slowest requests, the
servers' own statistics, outages and cold starts."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from tailrace.contract.summary.base import Estimate, Row, TokenMetric

Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
SloMetric = Literal["latency", "error_rate", "ttft", "tpot", "itl", "e2e", "pipeline_e2e", "pipeline_ttft", "accuracy"]
RequestKind = Literal["one-shot", "stream"]
StatusClass = Literal["ok", "http_error", "grpc_error", "timeout", "connection", "bad_response", "client_error",
                      "cancelled"]  # contract/records.py STATUSES


class SloVerdict(Row):
    """One SLO judged on one endpoint × region: PASS, FAIL or INCONCLUSIVE, with what was measured."""

    slo: int
    description: str
    metric: SloMetric
    implicit: bool = False  # the error-rate SLO a profile gets when it declares none
    endpoint: str
    model: str | None = None  # an SLO that names a model of the endpoint's mix: judged on its requests only
    region: str
    n: int
    effective_n: int | None = None
    exceeding: int | None = None
    verdict: Verdict
    measured: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    more_samples_needed: int | None = None
    trend: Literal["rising", "falling"] | None = None
    # a trend found: "settled" (moved, then held) or "growing" (still moving at its phase's end); whether it made a
    # PASS INCONCLUSIVE (only a trend that could carry the percentile across the threshold does: docs/METHODS.md)
    trend_kind: Literal["settled", "growing"] | None = None
    trend_changed_verdict: bool | None = None
    reason: str | None = None

    @property
    def backlog(self) -> bool:
        """Latency still rising at its phase's end (a summary from before trend_kind: any rising trend)."""
        return self.trend == "rising" and self.trend_kind != "settled"


class LatencyRow(Row):
    """One row of the latency table: an endpoint × region (ALL for every one), requests of one kind."""

    endpoint: str
    region: str
    kind: RequestKind = "one-shot"  # a row never pools the two
    count: int
    ok: int | None = None
    errors: int
    cancelled: int = 0  # abandoned by their client (the endpoint's cancel): in no percentile, no error rate
    error_rate: float
    achieved_rate: float
    intended_rate: float | None = None
    accuracy: float | None = None
    mean_ms: float | None = None
    max_ms: float | None = None
    send_lag_p99_ms: float | None = None
    goodput_rps: float | None = None
    percentiles: dict[str, Estimate]  # "p50", "p90", "p95", "p99", "p99.9"

    @property
    def p50(self) -> Estimate:
        return self.percentiles["p50"]

    @property
    def p95(self) -> Estimate:
        return self.percentiles["p95"]

    @property
    def p99(self) -> Estimate:
        return self.percentiles["p99"]


def first_latency_row(rows: Sequence[LatencyRow], endpoint: str = "*", region: str = "*",
                      kind: str | None = None) -> LatencyRow | None:
    """The first latency row of an endpoint × region ("*": over every one; a mixed run's pooled rows start with it),
    of `kind` if given; None: no such row."""
    return next((r for r in rows if (r.endpoint == endpoint or (endpoint == "*" and r.endpoint.startswith("*")))
                 and r.region == region and (kind is None or r.kind == kind)), None)


class BatchLatency(Row):
    """An embeddings endpoint's latency for one bucket of batch sizes (texts a request)."""

    batch: str  # "1" … "4", then "5–8", "9–16", …
    requests: int
    p50_ms: float | None = None
    p99_ms: float | None = None


class EmbeddingRow(Row):
    """One row of the embeddings table (openai-embeddings endpoints: inputs are texts) or of the rerank table (rerank
    endpoints: inputs are documents): inputs and their tokens per second, goodput in inputs, latency by inputs per
    request. The request latency with its intervals is the latency table's row."""

    endpoint: str
    region: str
    requests: int
    ok: int
    inputs: int
    inputs_per_s: float | None = None
    mean_inputs_per_request: float | None = None
    input_tokens: int | None = None  # the server's usage.prompt_tokens over the ok requests that reported it
    input_tokens_per_s: float | None = None
    mean_tokens_per_input: float | None = None
    tokens_reported: int = 0  # ok requests whose reply carried usage
    good_inputs_per_s: float | None = None  # inputs of ok requests within every latency SLO that applies
    latency_slo_ms: float | None = None
    by_batch: list[BatchLatency] = Field(default_factory=list)


class TokenRow(Row):
    """One row of the tokens table (streamed endpoints): TTFT, TPOT, ITL and E2E with intervals, and throughput."""

    endpoint: str
    model: str | None = None  # tokens_by_model: the model of the endpoint's mix (None in the tokens table)
    region: str
    requests: int
    ok: int
    outcomes: dict[str, int] = Field(default_factory=dict)
    output_tokens: int
    output_tokens_per_s: float
    mean_output_tokens: float | None = None
    token_sources: list[str] = Field(default_factory=list)
    ttft_ms: TokenMetric = Field(default_factory=TokenMetric)
    tpot_ms: TokenMetric = Field(default_factory=TokenMetric)
    itl_ms: TokenMetric = Field(default_factory=TokenMetric)
    e2e_ms: TokenMetric = Field(default_factory=TokenMetric)
    ttfa_ms: TokenMetric | None = None  # the first answer token (not reasoning), where a stream reasoned
    media_per_request: float | None = None  # images, audio clips and videos a request carried, where any did
    media_bytes_per_request: float | None = None  # their bytes (before base64)
    mean_input_tokens: float | None = None  # where media: the server's prompt tokens a request (theirs included)
    mean_reasoning_tokens: float | None = None
    reasoning_streams: int | None = None  # the ok streams that reasoned (sent reasoning tokens before the answer)
    goodput_rps: float | None = None
    schema_checked: int | None = None  # structured outputs: the ok streams checked against the JSON Schema
    schema_valid: int | None = None  # of them, those whose reply followed it
    schema_valid_rate: float | None = None
    schema_valid_ci_low: float | None = None  # exact (Clopper-Pearson) 95% interval
    schema_valid_ci_high: float | None = None

    def metric(self, name: str) -> TokenMetric:
        """"ttft", "tpot", "itl" or "e2e"."""
        return getattr(self, f"{name}_ms")

    @property
    def ttft(self) -> TokenMetric:
        return self.ttft_ms

    @property
    def tpot(self) -> TokenMetric:
        return self.tpot_ms

    @property
    def itl(self) -> TokenMetric:
        return self.itl_ms

    @property
    def e2e(self) -> TokenMetric:
        return self.e2e_ms


class PhaseRow(Row):
    phase: int
    name: str
    kind: str = "one-shot"
    count: int
    errors: int  # failed requests: not those their client cancelled (`cancelled`), which failed nothing
    cancelled: int = 0
    start_s: float | None = None  # (None: a closed-loop scenario's phase, which has no rate segment)
    end_s: float | None = None
    intended_rate: float | None = None
    achieved_rate: float | None = None
    p50_ms: float | None = None
    p50_ci: list[float | None] = Field(default_factory=list)
    p95_ms: float | None = None
    p95_ci: list[float | None] = Field(default_factory=list)
    p99_ms: float | None = None
    p99_ci: list[float | None] = Field(default_factory=list)


class LatencyLegs(Row):
    """Where a request's time went, mean ms per endpoint × region."""

    region: str
    endpoint: str
    count: int
    send_lag_ms: float | None = None
    network_up_ms: float | None = None
    server_queue_ms: float | None = None
    server_compute_ms: float | None = None
    server_other_ms: float | None = None
    network_down_ms: float | None = None
    sum_ms: float | None = None
    latency_mean_ms: float | None = None
    p99_server_queue_ms: float | None = None


class TtftLegs(Row):
    """Where the time to first token went, mean ms per endpoint × region."""

    region: str
    endpoint: str
    count: int
    send_lag_ms: float | None = None
    network_up_ms: float | None = None
    server_queue_ms: float | None = None
    server_prefill_ms: float | None = None
    server_other_ms: float | None = None
    network_down_ms: float | None = None
    ttft_mean_ms: float | None = None
    sum_ms: float | None = None


class QueueModels(Row):
    """The measured wait beside M/M/1, M/G/1 (Pollaczek–Khinchine) and G/G/1 (Kingman)."""

    rho: float | None = None
    mean_wait_ms: float | None = None
    p99_sojourn_ms: float | None = None
    measured_mean_wait_ms: float | None = None
    measured_p99_sojourn_ms: float | None = None
    mean_wait_rel_error: float | None = None
    service_cv2: float | None = None
    pk_mean_wait_ms: float | None = None
    pk_rel_error: float | None = None
    arrival_cv2: float | None = None
    gg1_mean_wait_ms: float | None = None
    gg1_rel_error: float | None = None
    wait_from_burstiness_ms: float | None = None


class QueueingRow(Row):
    """One server × model's queue: Little's law checked, utilization ρ = λ·S / slots."""

    endpoint: str
    model: str | None = None
    slots: int = 1
    arrival_rate: float | None = None
    throughput: float | None = None
    L_measured: float | None = None
    lambda_W: float | None = None
    littles_gap: float | None = None
    mean_residence_ms: float | None = None
    mean_service_ms: float | None = None
    requests_per_execution: float | None = None
    utilization: float | None = None
    utilization_flag: bool = False
    mean_queue_ms: float | None = None
    p99_queue_ms: float | None = None
    arrival_cv2: float | None = None
    mm1: QueueModels | None = None


class ArrivalsRow(Row):
    """One phase × source's arrivals tested against Poisson."""

    phase: int
    phase_name: str | None = None
    source: str
    count: int
    rate: float | None = None
    intended_rate: float | None = None
    ks_statistic: float | None = None
    ks_pvalue: float | None = None
    ad_statistic: float | None = None
    ad_pvalue: float | None = None
    index_of_dispersion: float | None = None
    dispersion_pvalue: float | None = None
    poisson_ok: bool | None = None
    schedule_ks_pvalue: float | None = None
    schedule_poisson_ok: bool | None = None
    schedule_failed: list[str] = Field(default_factory=list)
    send_lag_p99_ms: float | None = None
    send_lag_max_ms: float | None = None
    interpretation: str = ""


class ArrivalProcessRow(Row):
    """A declared arrival process (or a trace) checked against what was sent."""

    phase: int
    phase_name: str | None = None
    source: str
    process: str
    statistic: str | None = None  # (None: too few sends to test)
    expected: float | None = None
    measured: float | None = None
    ci_low: float | None = None  # gamma / constant: the gap cv's 99% bootstrap interval
    ci_high: float | None = None
    process_cv: float | None = None  # the process's own gap cv (before the send jitter)
    schedule_cv: float | None = None
    ks_pvalue: float | None = None
    windows: int | None = None  # onoff: the windows its dispersion is counted over
    ok: bool | None = None  # None: too few sends to test
    count: int
    lag_p50_ms: float | None = None
    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    interpretation: str = ""
    per_second: dict[str, list[int]] | None = None


class ValidityRow(Row):
    """Whether an endpoint × region's samples are stationary and independent enough for their intervals."""

    endpoint: str
    region: str
    n: int
    lag1_autocorrelation: float | None = None
    tau_p99: float | None = None
    effective_n_p99: int | None = None
    independence: str = ""
    phase: int | None = None
    phase_name: str | None = None
    phases: str | None = None
    stationary: bool | None = None
    trend_pvalue: float | None = None
    first_median_ms: float | None = None
    last_median_ms: float | None = None
    change: float | None = None
    windows: int = 0
    trend_kind: Literal["settled", "growing"] | None = None
    tail_pvalue: float | None = None
    reason: str | None = None


class ClockRow(Row):
    """A worker's clock against the reference: offset, drift and the fit's uncertainty."""

    worker: str
    offset_ms: float
    drift_ppm: float
    uncertainty_ms: float
    samples_used: int
    samples_total: int


class CancellationRow(Row):
    """Streams abandoned by their clients (an endpoint's `cancel`) per endpoint × region ('*': every region), in the
    measured phases; the '*' row adds the whole run's count and the server's own count of aborted requests."""

    endpoint: str
    region: str
    after: str  # time | first_token | tokens: what the profile declares closes a stream
    requests: int
    cancelled: int
    cancel_rate: float | None = None
    cancel_rate_ci_low: float | None = None
    cancel_rate_ci_high: float | None = None
    by_trigger: dict[str, int] = Field(default_factory=dict)
    before_first_token: int = 0
    tokens_received: int = 0
    mean_tokens_received: float | None = None
    closed_after_p50_ms: float | None = None  # from the intended send to the stream's close
    closed_after_p90_ms: float | None = None
    server_aborted: int | None = None  # '*' rows: the server's requests of the model finished for reason 'abort'
    cancelled_server_scope: int | None = None  # ours over what that count covers: the run, the server's endpoints
    server_metric: str | None = None

    @property
    def rate_text(self) -> str:
        """The cancel rate with its 95% interval, as the report and the terminal show it."""
        if self.cancel_rate is None:
            return "–"
        interval = "" if self.cancel_rate_ci_low is None else \
            f" [{self.cancel_rate_ci_low:.1%}, {self.cancel_rate_ci_high:.1%}]"
        return f"{self.cancel_rate:.1%}{interval}"


class HardwareRow(Row):
    """What one monitor's hardware did over one measured phase: utilization, memory, power, energy, per request."""

    monitor: str
    phase: int
    duration_s: float
    scrapes: int
    cpu_busy_pct: float | None = None
    gpu_util_pct: float | None = None
    sm_active_pct: float | None = None
    kv_cache_pct: float | None = None  # vLLM's KV cache in use, mean over the phase's scrapes
    kv_cache_max_pct: float | None = None
    requests_running: float | None = None  # vLLM's running and waiting requests, means
    requests_waiting: float | None = None
    memory_max_bytes: float | None = None
    gpu_memory_max_bytes: float | None = None
    gpus: int | None = None  # the GPUs the monitor spoke of (one series each in its per-GPU families)
    power_w: float | None = None
    power_from: str | None = None  # "energy counter" (the window's joules / its duration) or "power gauge" (a mean)
    energy_j: float | None = None  # the counter's increase over the window (measured, never estimated)
    energy_metric: str | None = None
    idle_power_w: float | None = None  # before the load
    energy_above_idle_j: float | None = None
    requests: int = 0  # ok requests of the phase, of the monitor's endpoints (None there: every endpoint)
    output_tokens: int = 0
    endpoints: list[str] | None = None
    energy_per_request_mj: float | None = None
    energy_per_1k_output_tokens_j: float | None = None
    output_tokens_per_j: float | None = None
    process_cores: float | None = None  # a monitored process's CPU-seconds per second (the embedded server's)
    estimated_energy_j: float | None = None  # an ESTIMATE (process CPU-seconds × declared watts per core)
    estimated_energy_per_request_mj: float | None = None
    estimated_energy_per_1k_output_tokens_j: float | None = None
    estimate_basis: str | None = None  # what the estimate is made of, shown wherever it is
    # the phase cut in equal parts: mJ per request sent in each (the samples of `tailrace compare`'s interval)
    energy_per_request_mj_windows: list[float] = Field(default_factory=list)
    estimated_energy_per_request_mj_windows: list[float] = Field(default_factory=list)


class HardwareEndpointRow(Row):
    """What one endpoint's requests cost a monitor's hardware over one measured phase, and the utilization law:
    ρ = X·S / slots (inferred) beside the measured utilization of its model."""

    monitor: str
    endpoint: str
    model: str
    phase: int
    requests: int
    throughput_rps: float | None = None
    mean_service_ms: float | None = None
    slots: float = 1.0
    rho: float | None = None
    measured_utilization: float | None = None
    measured_from: str | None = None  # "the model's CPU time" or "GPU utilization (a monitor of this endpoint alone)"
    utilization_law: str | None = None  # "holds" (within 20% of ρ), or which way it does not
    cpu_ms_per_request: float | None = None
    cpu_shared_by: list[str] | None = None  # endpoints of one model: its CPU time split by their requests
    energy_per_request_mj: float | None = None  # measured: a monitor of this endpoint alone, an energy counter
    energy_per_request_mj_windows: list[float] = Field(default_factory=list)
    estimated_energy_per_request_mj: float | None = None  # an ESTIMATE: the model's CPU-seconds × watts per core
    estimated_energy_per_request_mj_windows: list[float] = Field(default_factory=list)
    estimate_basis: str | None = None


class Hardware(Row):
    """The monitors' rows, per endpoint where they say it, and what they could not say (one line each)."""

    rows: list[HardwareRow] = Field(default_factory=list)
    endpoints: list[HardwareEndpointRow] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    timeline: dict[str, dict[str, list[float | None]]] = Field(default_factory=dict)  # monitor → the chart's series


class ErrorRow(Row):
    status: StatusClass
    code: str
    count: int
    example_error: str | None = None
    example_trace_ids: list[str] = Field(default_factory=list)


class SlowRequest(Row):
    """One of the slowest requests, by the trace ID the server's logs carry, with where its time went."""

    trace_id: str
    region: str
    endpoint: str
    kind: str = "one-shot"
    status: StatusClass
    latency_ms: float
    send_lag_ms: float
    t_intended_ref_ns: int
    network_up_ms: float | None = None
    server_queue_ms: float | None = None
    server_compute_ms: float | None = None
    server_other_ms: float | None = None
    network_down_ms: float | None = None
    # where the server's own span came back (OpenTelemetry): its name and split, on the server's clock
    span_server_span: str | None = None
    span_server_service: str | None = None
    span_server_queue_ms: float | None = None
    span_server_compute_ms: float | None = None
    span_server_ttft_ms: float | None = None
    span_server_prefill_ms: float | None = None
    span_server_decode_ms: float | None = None
    span_server_e2e_ms: float | None = None


class ServerSpanRow(Row):
    """One endpoint's requests joined with the servers' own spans: how many found theirs, and what those say (each
    a {p50, p99, mean} in ms) beside the client's TTFT and the rest (client TTFT − send lag − server TTFT)."""

    endpoint: str
    requests: int
    with_server_span: int
    share: float | None = None
    span_names: list[str] = Field(default_factory=list)
    server_queue_ms: dict[str, float] | None = None
    server_compute_ms: dict[str, float] | None = None
    server_ttft_ms: dict[str, float] | None = None
    server_prefill_ms: dict[str, float] | None = None
    server_decode_ms: dict[str, float] | None = None
    server_e2e_ms: dict[str, float] | None = None
    client_ttft_ms: dict[str, float] | None = None
    client_rest_ms: dict[str, float] | None = None


class ServerSpans(Row):
    """The servers' spans read back: per endpoint, the spans in all, those of traces no request carries."""

    rows: list[ServerSpanRow] = Field(default_factory=list)
    spans: int = 0
    unknown_trace_spans: int = 0
    sources: list[str] = Field(default_factory=list)


class EndpointStatistics(Row):
    """A server × model's own counters (Triton's statistics or the embedded endpoint's), with the client's count."""

    endpoints: list[str] = Field(default_factory=list)
    endpoint: str | None = None
    server: str
    kind: str
    model: str
    success: int | None = None
    fail: int | None = None
    inference_count: int | None = None
    execution_count: int | None = None
    mean_batch: float | None = None
    batch_sizes: dict[str, int] = Field(default_factory=dict)
    mean_queue_ms: float | None = None
    mean_compute_input_ms: float | None = None
    mean_compute_infer_ms: float | None = None
    mean_compute_output_ms: float | None = None
    client_ok: int | None = None


class ServerTimelinePoint(Row):
    t_ns: int
    interval_s: float
    success_per_s: float
    fail: int = 0
    mean_batch: float | None = None
    mean_queue_ms: float | None = None
    mean_compute_input_ms: float | None = None
    mean_compute_infer_ms: float | None = None
    mean_compute_output_ms: float | None = None


class Outage(Row):
    """A stretch where an endpoint failed every request, and whether it recovered."""

    endpoint: str
    regions: list[str] = Field(default_factory=list)
    start_s: float
    end_s: float | None = None  # None: not recovered by the run's end
    duration_s: float | None = None
    start_ref_ns: int
    end_ref_ns: int | None = None
    failed: int
    succeeded: int = 0
    recovered: bool
    errors: dict[str, int] = Field(default_factory=dict)
    example_trace_ids: list[str] = Field(default_factory=list)


class ColdStart(Row):
    endpoint: str
    server: str
    ready_s: float | None = None
    first_success_s: float | None = None
    first_request_ms: float | None = None
    first_k: int = 0
    first_k_errors: int = 0
    first_k_mean_ms: float | None = None
    first_k_max_ms: float | None = None
    steady_mean_ms: float | None = None
    steady_p50_ms: float | None = None
    first_k_vs_steady: float | None = None
