"""A sweep's result (sweep.json; `python -m tailrace.contract.summary.sweep` prints its JSON Schema): every point
run — its configuration, load, each tier's outcome, latency and token percentiles with intervals, throughput — the
highest load each SLO tier holds per configuration with the bracket around it, the knee of each configuration's
latency curve, the throughput–interactivity frontier with the Pareto-optimal points marked, and a recommendation."""
from __future__ import annotations

import json
from typing import Literal

from pydantic import Field

from tailrace.contract.summary.accuracy import AccuracyTrend
from tailrace.contract.summary.base import Estimate, Row

PointStatus = Literal["done", "failed", "interrupted"]
TierOutcome = Literal["pass", "fail", "generator-limit", "undecided"]


class SweepPoint(Row):
    """One run of the sweep: where it is, what it was set to, and what it measured."""

    index: int
    config: str  # the configuration's label: its non-load axes' levels ('' where the sweep has none)
    levels: dict[str, int | float | str | bool]  # axis → level
    load: float | None = None  # the load axis's level (requests or sessions per second; streams in flight)
    repeat: int = 0
    added: bool = False  # placed by the search of a tier's edge, not declared
    status: PointStatus = "done"
    why: str = ""  # a failed point: what failed (a server that never became ready, with its log's tail); a done
    # point run again whose run again failed (its server gone): that, the point keeping the run before
    run_id: str | None = None
    run_dir: str | None = None  # relative to the sweep's directory
    verdict: str | None = None
    tiers: dict[str, TierOutcome] = Field(default_factory=dict)
    tier_why: dict[str, str] = Field(default_factory=dict)
    goodput_rps: dict[str, float] = Field(default_factory=dict)  # tier → requests/s within every one of its SLOs
    backlog: bool = False  # latency still rising at the run's end: the server did not keep up (off the frontier)
    achieved_rate: float | None = None
    requests: int = 0
    errors: int = 0
    latency_ms: dict[str, Estimate] = Field(default_factory=dict)  # p50 / p90 / p99 (a stream's: E2E)
    ttft_ms: dict[str, Estimate] = Field(default_factory=dict)
    tpot_ms: dict[str, Estimate] = Field(default_factory=dict)
    itl_ms: dict[str, Estimate] = Field(default_factory=dict)
    output_tokens_per_s: Estimate | None = None  # the server's, over every stream (interval: the completed count's)
    tokens_per_s_per_user: Estimate | None = None  # 1000 / TPOT p50 (its interval from TPOT's)
    energy_per_1k_tokens_j: float | None = None  # measured by the profile's [[monitors]]
    gpus: int | None = None  # the GPUs the profile's [[monitors]] spoke of (summed over monitors)
    graded_judged: int = 0  # graded answers judged (prompts.graded: right + wrong + unparsable), every endpoint
    graded_correct: int = 0
    accuracy: float | None = None  # graded_correct / graded_judged, with its exact 95% interval
    accuracy_ci_low: float | None = None
    accuracy_ci_high: float | None = None
    correct_goodput_rps: float | None = None  # graded requests right and on time, per second
    duration_s: float | None = None  # its load's seconds (longer than the profile's where it ran again to decide)
    to_decide_s: float | None = None  # an undecided tier's: how long a run would decide it (None: none would)
    extended_from_s: list[float] = Field(default_factory=list)  # the shorter runs it replaced (sweep.extend_s)
    generator_limit: str = ""  # its run INVALID as the generator fell behind: the numbers are the generator's
    generator_rerun: bool = False  # run again once at the same length: the first run's generator fell behind
    elapsed_s: float | None = None


class TierEdge(Row):
    """The highest load one configuration holds under one tier's SLOs: the highest passing load and the lowest
    failing one above it (the edge lies between)."""

    config: str
    tier: str
    highest_pass: float | None = None
    lowest_fail: float | None = None
    within_tolerance: bool = False
    note: str = ""


class Knee(Row):
    """Where a configuration's latency starts to rise fastest with load (a monotone fit of its p99 against load; its
    p90 or p50 where its points are too short for a p99)."""

    config: str
    metric: str  # the latency that was fitted: "ttft p99" for streams, "latency p99" otherwise (p90, p50: shorter points)
    load: float | None = None
    slope_ms_per_unit: float | None = None


class FrontierPoint(Row):
    """One point of the throughput–interactivity frontier: output tokens/s of the server against tokens/s per
    user, each with its interval."""

    index: int
    config: str
    load: float | None = None
    tokens_per_s: Estimate
    tokens_per_s_per_user: Estimate
    tokens_per_s_per_gpu: Estimate | None = None  # the server's tokens/s over the GPUs its monitors spoke of
    gpus: int | None = None
    energy_per_1k_tokens_j: float | None = None
    pareto: bool = False


class SweepResult(Row):
    """sweep.json."""

    sweep_version: int = 1
    profile: str
    sweep_id: str
    axes: dict[str, list[int | float | str | bool]]
    load_axis: str | None = None
    tiers: list[str] = Field(default_factory=list)
    points: list[SweepPoint] = Field(default_factory=list)
    edges: list[TierEdge] = Field(default_factory=list)
    knees: list[Knee] = Field(default_factory=list)
    frontier: list[FrontierPoint] = Field(default_factory=list)
    accuracy_trends: list[AccuracyTrend] = Field(default_factory=list)  # per configuration (its `endpoint`: the label)
    recommendation: list[str] = Field(default_factory=list)
    interrupted_runs: list[str] = Field(default_factory=list)  # run directories of points cut short, kept
    overrides: list[str] = Field(default_factory=list)  # --set and TAILRACE_SET_* it began with: --resume applies them
    complete: bool = False
    elapsed_s: float = 0.0


def sweep_schema() -> dict:
    return SweepResult.model_json_schema()


if __name__ == "__main__":
    print(json.dumps(sweep_schema(), indent=1))
