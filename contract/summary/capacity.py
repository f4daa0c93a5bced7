"""A capacity search's result (report capacity.json): each trial — a run at one rate, judged on its latency SLOs —
the bracket the search closed on, how it ended, and what to provision."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from tailrace.contract.profile.goals import Slo
from tailrace.contract.summary.base import Row


class CapacityTrial(Row):
    """One trial: its rate and length, what it achieved, its latency (and a stream's tokens and token latency),
    the busiest server's utilization, and its outcome (pass, fail, undecided, generator-limit) with why."""

    trial: int
    rate: float
    duration_s: float
    achieved_rate: float
    count: int
    errors: int
    mean_ms: float | None = None
    outcome: Literal["pass", "fail", "generator-limit", "undecided"]  # analysis/decide/capacity_search.py
    why: str
    run_id: str
    to_decide_s: float | None = None  # an undecided trial: how long one at this rate would take to decide
    p50_ms: float | None = None
    p50_ci_low: float | None = None
    p50_ci_high: float | None = None
    p95_ms: float | None = None
    p95_ci_low: float | None = None
    p95_ci_high: float | None = None
    p99_ms: float | None = None
    p99_ci_low: float | None = None
    p99_ci_high: float | None = None
    output_tokens_per_s: float | None = None
    inputs_per_s: float | None = None  # embeddings / rerank endpoints: the texts (documents) their ok requests carried, a second
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    utilization: float | None = None
    mean_service_ms: float | None = None
    slots: int = 1
    measured_utilization: float | None = None  # the busiest endpoint's, from [[monitors]] (U = X·S checked there)
    energy_per_request_mj: float | None = None  # measured: its monitors' energy counters, summed
    estimated_energy_per_request_mj: float | None = None  # an ESTIMATE (CPU-seconds × watts per core), apart
    energy_per_1k_output_tokens_j: float | None = None


class Recommendation(Row):
    """What to provision: the rate to plan one instance at (capacity / headroom, at most max_utilization × slots /
    S), what limits it, the requests in flight there (L = λ·W), and the instances a peak needs."""

    headroom: float
    max_utilization: float
    slots: int
    mean_service_ms: float | None = None
    rate_by_slo_headroom: float
    rate_by_utilization: float | None = None
    planned_rate_per_instance: float
    limited_by: str
    utilization_at_planned: float | None = None
    in_flight_at_planned: float | None = None
    peak_rate: float | None = None
    instances_for_peak: int | None = None
    provisioned_rate: float | None = None


class CapacityResult(Row):
    """The search's answer: `status` found, at-least (the generators saturated), budget (spent before the bracket
    closed), stopped (Ctrl-C or SIGTERM before it closed) or none; the capacity in requests/s (and a stream's tokens/s
    there), the bracket, the trials."""

    profile: str
    status: Literal["found", "at-least", "budget", "stopped", "none"]
    note: str
    capacity_rps: float | None = None
    bracket: list[float | None] = Field(default_factory=list)
    tolerance: float
    trials: int
    elapsed_s: float
    slos: list[Slo] = Field(default_factory=list)  # the profile's latency SLOs, as it declares them
    capacity_output_tokens_per_s: float | None = None
    capacity_inputs_per_s: float | None = None  # embeddings / rerank endpoints: texts (documents) a second at capacity
    capacity_energy_per_request_mj: float | None = None  # at the capacity rate, measured ([[monitors]])
    capacity_estimated_energy_per_request_mj: float | None = None  # ... or estimated, labelled
    recommendation: Recommendation | None = None
    exit_code: int
    trial_rows: list[CapacityTrial] = Field(default_factory=list)
