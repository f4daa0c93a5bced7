"""The open-loop arrival schedule: one seeded global Poisson process, split by region, worker, endpoint.

Arrivals of a (possibly piecewise-constant) rate λ(t) come from unit-rate exponential gaps mapped
through the inverse of Λ(t) = ∫λ (time rescaling), so phases keep the process Poisson. Each arrival
then draws its region (by share), worker and endpoint (by weight): independent thinning of a Poisson
process gives independent Poisson processes, so each worker's arrivals are Poisson at its share and
their superposition is the global process. Every worker computes the same global draw from the seed
and keeps its own part: no coordination needed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Plan:
    """One worker's arrivals: offsets (ns) from the start of the run, which endpoint, which phase, which sample."""

    offsets_ns: np.ndarray
    endpoint_index: np.ndarray
    phase_index: np.ndarray
    sample_index: np.ndarray


def rate_steps(rate: float, phases: list[tuple[float, float]], warmup_s: float) -> list[tuple[float, float]]:
    """(start_s, rate) steps from the run start: warm-up at the first rate, then the phases shifted by warm-up."""
    steps = [(0.0, phases[0][1] if phases else rate)]
    for at_s, r in phases or [(0.0, rate)]:
        steps.append((warmup_s + at_s, r))
    merged: list[tuple[float, float]] = []
    for start, r in steps:
        if merged and merged[-1][0] == start:
            merged[-1] = (start, r)
        else:
            merged.append((start, r))
    return merged


def global_arrivals(steps: list[tuple[float, float]], total_s: float, seed: int) -> np.ndarray:
    """Arrival times (s) of a Poisson process with piecewise-constant rate on [0, total_s)."""
    rng = np.random.default_rng(seed)
    starts = np.array([s for s, _ in steps] + [total_s])
    rates = np.array([r for _, r in steps])
    widths = np.diff(starts)
    cum = np.concatenate([[0.0], np.cumsum(widths * rates)])  # Λ at each step start
    expected = cum[-1]
    n_draw = int(expected + 10 * np.sqrt(expected) + 100)
    unit = np.cumsum(rng.exponential(1.0, n_draw))
    while unit[-1] < expected:
        unit = np.concatenate([unit, unit[-1] + np.cumsum(rng.exponential(1.0, n_draw))])
    unit = unit[unit < expected]
    k = np.searchsorted(cum, unit, side="right") - 1
    return starts[k] + (unit - cum[k]) / rates[k]


def worker_plan(*, rate: float, phases: list[tuple[float, float]], warmup_s: float, duration_s: float, seed: int,
                region_shares: list[float], region_index: int, workers_in_region: int, worker_index: int,
                endpoint_weights: list[float], n_samples: int, sequential: bool) -> Plan:
    """The part of the global process that one worker sends."""
    steps = rate_steps(rate, phases, warmup_s)
    times = global_arrivals(steps, warmup_s + duration_s, seed)
    rng = np.random.default_rng([seed, 1])
    shares = np.asarray(region_shares) / np.sum(region_shares)
    region = rng.choice(len(shares), size=len(times), p=shares)
    worker = rng.integers(0, workers_in_region, size=len(times))
    weights = np.asarray(endpoint_weights) / np.sum(endpoint_weights)
    endpoint = rng.choice(len(weights), size=len(times), p=weights)
    sample = np.arange(len(times)) % n_samples if sequential else rng.integers(0, n_samples, size=len(times))
    # phase 0 = warm-up (when there is one), then 1.. for each step of the measured window; without a
    # warm-up, rate_steps merged the first step into the start, so the first index is shifted to 1
    phase = np.searchsorted(np.array([s for s, _ in steps[1:]]), times, side="right")
    if warmup_s <= 0:
        phase = phase + 1
    mine = (region == region_index) & (worker == worker_index)
    return Plan((times[mine] * 1e9).astype(np.int64), endpoint[mine].astype(np.int32), phase[mine].astype(np.int32),
                sample[mine].astype(np.int64))

