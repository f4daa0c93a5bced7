"""The open-loop arrival schedule: one seeded global Poisson process, split by region, worker, endpoint.

The rate λ(t) is piecewise linear: steps, ramps and spikes over the run, each a segment of it (and a
phase of the report). Arrivals come from unit-rate exponential gaps mapped through the inverse of
Λ(t) = ∫λ (time rescaling), so the process stays Poisson through every change. Each arrival then draws
its region (by share), worker and endpoint (by weight): independent thinning of a Poisson process gives
independent Poisson processes, so each worker's arrivals are Poisson at its share and their
superposition is the global process. Every worker computes the same global draw from the seed and keeps
its own part: no coordination needed, and phase boundaries fall at the same reference instant everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contract.profile import Phase
from contract.rates import Segment, rate_segments


def phase_of(segments: list[Segment], warmup_s: float, times_s: np.ndarray) -> np.ndarray:
    """Phase number of each time: 0 = warm-up, then 1.. per measured segment."""
    starts = np.array([s.start_s for s in segments[1:]])
    phase = np.searchsorted(starts, times_s, side="right")
    return phase if warmup_s > 0 else phase + 1


def global_arrivals(segments: list[Segment], seed: int) -> np.ndarray:
    """Arrival times (s) of a Poisson process with the piecewise-linear rate `segments` describe."""
    rng = np.random.default_rng(seed)
    cum = np.concatenate([[0.0], np.cumsum([s.expected for s in segments])])  # Λ at each segment start
    expected = cum[-1]
    n_draw = int(expected + 10 * np.sqrt(expected) + 100)
    unit = np.cumsum(rng.exponential(1.0, n_draw))
    while unit[-1] < expected:
        unit = np.concatenate([unit, unit[-1] + np.cumsum(rng.exponential(1.0, n_draw))])
    unit = unit[unit < expected]
    k = np.searchsorted(cum, unit, side="right") - 1
    times = np.empty_like(unit)
    for i, seg in enumerate(segments):
        mask = k == i
        if mask.any():
            times[mask] = seg.start_s + seg.invert(unit[mask] - cum[i])
    return times


@dataclass(frozen=True)
class Plan:
    """One worker's arrivals: offsets (ns) from the start of the run, which endpoint, which phase, which sample."""

    offsets_ns: np.ndarray
    endpoint_index: np.ndarray
    phase_index: np.ndarray
    sample_index: np.ndarray


def worker_plan(*, rate: float, phases: list[Phase], warmup_s: float, duration_s: float, seed: int,
                region_shares: list[float], region_index: int, workers_in_region: int, worker_index: int,
                endpoint_weights: list[float], n_samples: int, sequential: bool) -> Plan:
    """The part of the global process that one worker sends."""
    segments = rate_segments(rate, phases, warmup_s, duration_s)
    times = global_arrivals(segments, seed)
    rng = np.random.default_rng([seed, 1])
    shares = np.asarray(region_shares) / np.sum(region_shares)
    region = rng.choice(len(shares), size=len(times), p=shares)
    worker = rng.integers(0, workers_in_region, size=len(times))
    weights = np.asarray(endpoint_weights) / np.sum(endpoint_weights)
    endpoint = rng.choice(len(weights), size=len(times), p=weights)
    sample = np.arange(len(times)) % n_samples if sequential else rng.integers(0, n_samples, size=len(times))
    phase = phase_of(segments, warmup_s, times)
    mine = (region == region_index) & (worker == worker_index)
    return Plan((times[mine] * 1e9).astype(np.int64), endpoint[mine].astype(np.int32), phase[mine].astype(np.int32),
                sample[mine].astype(np.int64))

