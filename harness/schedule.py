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


@dataclass(frozen=True)
class Segment:
    """A piece of the rate function: linear from rate_start to rate_end on [start_s, end_s) of the run."""

    start_s: float
    end_s: float
    rate_start: float
    rate_end: float
    name: str

    @property
    def width_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def expected(self) -> float:
        """∫λ over the segment: the expected number of arrivals."""
        return 0.5 * (self.rate_start + self.rate_end) * self.width_s

    def invert(self, u: np.ndarray) -> np.ndarray:
        """Times (s from start_s) at which ∫λ from start_s reaches u (0 <= u <= expected)."""
        a = (self.rate_end - self.rate_start) / (2 * self.width_s)
        if abs(a) < 1e-12:
            return u / self.rate_start
        # a τ² + r0 τ − u = 0, in the form that stays accurate when a is small
        return 2 * u / (self.rate_start + np.sqrt(np.maximum(self.rate_start ** 2 + 4 * a * u, 0.0)))


def _get(phase, key: str, default=None):
    return phase.get(key, default) if isinstance(phase, dict) else getattr(phase, key, default)


def rate_segments(rate: float, phases: list, warmup_s: float, duration_s: float) -> list[Segment]:
    """The run's rate function: a warm-up segment (if any) at the opening rate, then one segment per phase.

    `phases` are dicts or objects with at_s and kind: "step" (rate from at_s), "ramp" (linear from the
    current rate to `rate` over duration_s, then held), "spike" (current rate × factor for duration_s,
    then back). Times are seconds of the measured window; the result is in seconds of the run.
    """
    measured: list[Segment] = []
    current = rate
    ordered = sorted(phases, key=lambda p: _get(p, "at_s"))
    t = 0.0
    for i, ph in enumerate(ordered):
        at = float(_get(ph, "at_s"))
        nxt = float(_get(ordered[i + 1], "at_s")) if i + 1 < len(ordered) else duration_s
        nxt = min(nxt, duration_s)
        if at >= duration_s:
            break
        if at > t:
            measured.append(Segment(t, at, current, current, f"{current:g}/s"))
        kind = _get(ph, "kind", "step") or "step"
        if kind == "step":
            current = float(_get(ph, "rate"))
            measured.append(Segment(at, nxt, current, current, f"{current:g}/s"))
        elif kind == "ramp":
            target = float(_get(ph, "rate"))
            end = min(at + float(_get(ph, "duration_s")), nxt)
            measured.append(Segment(at, end, current, target, f"ramp {current:g}→{target:g}/s"))
            current = target
            if end < nxt:
                measured.append(Segment(end, nxt, current, current, f"{current:g}/s"))
        elif kind == "spike":
            factor = float(_get(ph, "factor"))
            end = min(at + float(_get(ph, "duration_s")), nxt)
            measured.append(Segment(at, end, current * factor, current * factor, f"spike ×{factor:g} "
                                    f"({current * factor:g}/s)"))
            if end < nxt:
                measured.append(Segment(end, nxt, current, current, f"after spike {current:g}/s"))
        else:
            raise ValueError(f"unknown phase kind {kind!r}")
        t = nxt
    if t < duration_s:
        measured.append(Segment(t, duration_s, current, current, f"{current:g}/s"))
    measured = [s for s in measured if s.width_s > 0]
    out = [Segment(0.0, warmup_s, measured[0].rate_start, measured[0].rate_start, "warm-up")] if warmup_s > 0 else []
    return out + [Segment(s.start_s + warmup_s, s.end_s + warmup_s, s.rate_start, s.rate_end, s.name)
                  for s in measured]


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


def worker_plan(*, rate: float, phases: list, warmup_s: float, duration_s: float, seed: int,
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

