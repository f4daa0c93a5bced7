"""The servers tailrace starts, capacity search, decisions between variants, monitors, OpenTelemetry, the generator's settings."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from tailrace.contract.profile.base import (
    EMBEDDED,
    NAME,
    TRITON,
    _Strict,
    check_url,
)
from tailrace.contract.trace_context import Sample


class EmbeddedAccuracy(_Strict):
    """A synthetic generative model answering graded items: right with probability
    max(floor, correct − fall_per_seq × (batch − 1)), the batch counted at the answer's first token."""

    correct: float = Field(0.9, ge=0, le=1, description="the probability of a right answer alone in its batch")
    fall_per_seq: float = Field(0.0, ge=0, le=1, description="how much it falls for each other sequence in the batch")
    floor: float = Field(0.0, ge=0, le=1, description="the lowest it falls to")
    answer_after_tokens: int = Field(8, ge=0, le=100_000, description="tokens of the model's usual walk before the "
                                                                      "answer's words (its reasoning)")


class Embedded(_Strict):
    models_dir: str = "build/models"
    slots: dict[str, int] = Field(default_factory=dict)
    queue_depth: dict[str, int] = Field(default_factory=dict)
    max_batch: dict[str, int] = Field(default_factory=dict)
    mm1_mean_ms: float | None = Field(None, gt=0)
    fault_injection: bool = False
    process_per_model: bool = Field(False, description="one endpoint process per model (memory per variant)")
    cpus: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, min_length=1, description="pin the endpoint process(es) to these CPUs (keep them off the generators')")
    max_num_seqs: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="generative model → most sequences in its running batch")
    max_num_batched_tokens: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="generative model → token budget of one step")
    max_waiting: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="generative model → waiting requests before new ones are refused (429)")
    max_model_len: dict[str, Annotated[int, Field(ge=1, le=10_000_000)]] = Field(
        default_factory=dict, description="generative model → the longest prompt + max_tokens it takes (default 4096)")
    kv_cache_tokens: dict[str, Annotated[int, Field(ge=16, le=1_000_000_000)]] = Field(
        default_factory=dict, description="generative model → its prefix cache's budget in tokens (default 262144; "
                                          "least recently used blocks evicted beyond it)")
    accuracy: dict[str, EmbeddedAccuracy] = Field(
        default_factory=dict, description="synthetic generative model → how it answers graded items (the endpoints' "
                                          "prompts.graded): accuracy that falls as its batch fills, known per request")
    prefix_caching: dict[str, bool] = Field(
        default_factory=dict, description="generative model → automatic prefix caching (default on, as vLLM's; "
                                          "tiny_lm does not cache)")


class TritonLocal(_Strict):
    """A local Triton Inference Server (PyTriton, CPU) that `tailrace run` starts for endpoints with url 'triton'."""

    python: str | None = Field(None, description="interpreter of the PyTriton virtualenv (default .venv-triton)")
    models_dir: str = "build/models"
    max_batch: int = Field(16, ge=1, le=1024, description="max_batch_size of every model")
    dynamic_batching: bool = True
    queue_delay_us: int = Field(0, ge=0, le=1_000_000, description="dynamic batcher's max_queue_delay_microseconds")
    instances: int = Field(1, ge=1, le=16, description="model instances (execution slots) per model")


class Capacity(_Strict):
    """`tailrace capacity`: exponential growth, then bisection over short Poisson trials."""

    start_rate: float = Field(50, gt=0, le=100_000)
    growth: float = Field(2.0, gt=1, le=10)
    tolerance: float = Field(0.05, gt=0, lt=1, description="stop when the bracket is within this fraction")
    budget_s: float = Field(900, gt=0, description="total time for the search")
    min_trial_s: float = Field(5, gt=0)
    max_trial_s: float = Field(120, gt=0)
    samples_margin: float = Field(3, ge=1, description="× the samples the SLO percentile needs, per trial group")
    trial_warmup_s: float = Field(1, ge=0)
    peak_rate: float | None = Field(None, gt=0, description="expected production peak, for the recommendation")
    headroom: float = Field(1.5, ge=1)
    max_utilization: float = Field(0.7, gt=0, le=1)


class DecisionConstraints(_Strict):
    p95_ms_max: float | None = Field(None, gt=0)
    accuracy_min: float | None = Field(None, ge=0, le=1)
    memory_mb_max: float | None = Field(None, gt=0)
    capacity_rps_min: float | None = Field(None, gt=0)
    ttft_p95_ms_max: float | None = Field(None, gt=0, description="generative variants: TTFT p95 ≤")
    tpot_p95_ms_max: float | None = Field(None, gt=0, description="generative variants: TPOT p95 ≤")
    output_tokens_per_s_min: float | None = Field(None, gt=0, description="generative variants: output tokens/s ≥")
    energy_budget_mj: float | None = Field(None, gt=0, description="energy per request ≤ (mJ; from [[monitors]]: "
                                                                   "measured, or estimated where no variant is)")


DECISION_METRICS = Literal["p95_ms", "accuracy", "memory_mb", "capacity_rps", "ttft_p95_ms", "tpot_p95_ms",
                           "output_tokens_per_s", "energy_mj"]


class Decision(_Strict):
    """Model-variant decision: which endpoints are variants, the baseline, weights and hard constraints."""

    variants: list[str] = Field(default_factory=list, description="endpoint names (default: every endpoint "
                                                                    "except the baseline)")
    baseline: str | None = Field(None, description="an 'inprocess' endpoint: the model's own cost, no serving")
    weights: dict[DECISION_METRICS, float] | None = Field(
        None, description="default: p95_ms 1, accuracy 1, memory_mb 0.5, capacity_rps 0.5; for generative variants "
                          "ttft_p95_ms 1, tpot_p95_ms 1, output_tokens_per_s 0.5, capacity_rps 0.5, memory_mb 0.25 "
                          "(their p95_ms is E2E); energy_mj 0.5 where [[monitors]] say it")
    constraints: DecisionConstraints = Field(default_factory=DecisionConstraints)
    capacity_rps: dict[str, float] = Field(default_factory=dict, description="measured capacities (e.g. from "
                                           "`tailrace capacity`) per endpoint; otherwise slots / mean service time")

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: dict | None) -> dict | None:
        if v is None:
            return v
        if any(w < 0 for w in v.values()) or not any(w > 0 for w in v.values()):
            raise ValueError("weights must be >= 0 and at least one > 0")
        return v


class ColdStart(_Strict):
    first_k: int = Field(20, ge=1, le=100_000, description="requests per endpoint compared with steady state")


class Monitor(_Strict):
    """A Prometheus endpoint of what the hardware did — NVIDIA's DCGM exporter, the node exporter (CPU, memory, RAPL
    joules), Kepler, Triton's or vLLM's /metrics — scraped by the master through the run, each scrape stamped on its
    clock."""

    name: str = Field(pattern=NAME, description="the source's name in the report (a host, a GPU node)")
    url: str = Field(description="its metrics, e.g. http://gpu-node-1:9400/metrics (DCGM), http://host:9100/metrics; "
                                 "'embedded': the embedded server tailrace run starts (its process's CPU and memory, "
                                 "each model's CPU time, RAPL and NVML where the host has them); 'triton': the Triton "
                                 "it starts (its CPU and GPU metrics)")
    interval_s: float = Field(1.0, ge=0.1, le=600, description="seconds between scrapes")
    timeout_s: float = Field(1.0, gt=0, le=30, description="a scrape that takes longer is missed (and said)")
    endpoints: list[str] = Field(default_factory=list, description="the endpoints whose server it watches (default: "
                                 "every endpoint): its energy per request counts their requests; one endpoint alone "
                                 "gives that endpoint's energy per request")
    watts_per_core: float | None = Field(None, gt=0, le=1000, description="where the source has no energy counter: "
                                         "an estimate, its processes' CPU-seconds × these watts (labelled as an "
                                         "estimate, never added to measured joules)")

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        return v if v in (EMBEDDED, TRITON) else check_url(v, ("http", "https"))


class OtelReceive(_Strict):
    """An OTLP receiver the master opens for the run: servers send it their spans (vLLM's --otlp-traces-endpoint,
    Triton's trace mode), which the report joins to the requests."""

    host: str = Field("127.0.0.1", description="the address it binds (a server on another host: this host's)")
    grpc_port: int = Field(4317, ge=0, le=65535, description="OTLP over gRPC (vLLM's default protocol); 0: any")
    http_port: int = Field(4318, ge=0, le=65535, description="OTLP over HTTP, POST /v1/traces; 0: any")
    linger_s: float = Field(6.0, ge=0, le=600, description="kept open this long after the last response, for the "
                                                          "spans servers batch (the SDK's default: every 5 s)")


class OtelExport(_Strict):
    """Where the run's requests go as spans once it ends (as `tailrace export otlp` sends them)."""

    endpoint: str = Field(description="an OTLP receiver: http://collector:4318 (HTTP) or http://collector:4317 (gRPC)")
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    sample: str = Field("all", description="all, or any of slowest:N, errors, share:F joined by commas")
    headers: dict[str, str] = Field(default_factory=dict, description="sent with every batch (no secrets: the "
                                                                     "plan records the profile)")

    @field_validator("endpoint")
    @classmethod
    def _url(cls, v: str) -> str:
        return check_url(v, ("http", "https"))

    @field_validator("sample")
    @classmethod
    def _sample(cls, v: str) -> str:
        Sample.parse(v)  # a SampleError is a ValueError: the field named, the part that is wrong said
        return v


class Otel(_Strict):
    """OpenTelemetry: receive the servers' spans during the run; export the requests as spans after it."""

    receive: OtelReceive | None = None
    export: OtelExport | None = None


class ServerStats(_Strict):
    interval_s: float = Field(5, gt=0, le=3600, description="periodic statistics + metrics snapshots")


class Generator(_Strict):
    send_lag_p99_ms: float = Field(5, gt=0, description="saturation threshold per window")
    stall_max_ms: float = Field(250, gt=0, description="a lagging window next to clean ones is a transient host "
                                                       "stall (a warning) unless its sends were late this long "
                                                       "on end")
    behind_max_s: float = Field(2, gt=0, description="a generator behind schedule at the end of consecutive windows "
                                                      "spanning this long did not send the planned arrivals (INVALID)")
    window_s: float = Field(1, gt=0)
    max_in_flight: int = Field(5000, ge=1)
    chunk_rows: int = Field(5000, ge=1)
    chunk_seconds: float = Field(0.25, gt=0, le=5, description="close a chunk at least this often (small chunks "
                                                                 "keep each write, done on the sending loop, short)")
    file_seconds: float = Field(5.0, ge=0, le=60, description="a worker's chunks reach its directory together as one "
                                                              "file at least this often, at most 1,024 rows a file "
                                                              "(0: a file a chunk); the analysis opens each file, "
                                                              "~1 ms whatever its rows")
    spin_ms: float = Field(1.5, ge=0, le=5, description="yield-spin the last ms before each send: gevent timers "
                                                         "wake ~1 ms late (precision vs CPU)")
    send_path: Literal["inline", "greenlet"] = Field(
        "inline", description="open-loop plain-HTTP KServe requests: driven by the issue loop itself, each record "
                              "written while no send is due (inline), or a greenlet a request (greenlet)")
    ship_dir: str | None = Field(None, description="where remote workers write chunks (a shared directory)")
    cpus: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, min_length=1, description="pin the local Locust master, workers and delay proxies to these CPUs")
    master_timeout_s: float = Field(30, ge=3, le=3600, description="a worker keeps its schedule through a silent "
                                                                   "master this long (and the master a silent worker) "
                                                                   "before it stops: robustness against how long "
                                                                   "orphaned load may last")
