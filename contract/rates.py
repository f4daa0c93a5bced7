"""The rate function of a run: piecewise linear over steps, ramps and spikes (one segment per phase of the
report). The generator draws its arrivals from it; the analysis names phases and intended rates by it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contract.profile import Phase


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


def rate_segments(rate: float, phases: list[Phase], warmup_s: float, duration_s: float) -> list[Segment]:
    """The run's rate function: a warm-up segment (if any) at the opening rate, then one segment per phase.

    `phases` (the profile's load.phases) each have at_s and kind: "step" (rate from at_s), "ramp" (linear from the
    current rate to `rate` over duration_s, then held), "spike" (current rate × factor for duration_s,
    then back). Times are seconds of the measured window; the result is in seconds of the run.
    """
    measured: list[Segment] = []
    current = rate
    ordered = sorted(phases, key=lambda p: p.at_s)
    t = 0.0
    for i, ph in enumerate(ordered):
        at = ph.at_s
        nxt = ordered[i + 1].at_s if i + 1 < len(ordered) else duration_s
        nxt = min(nxt, duration_s)
        if at >= duration_s:
            break
        if at > t:
            measured.append(Segment(t, at, current, current, f"{current:g}/s"))
        if ph.kind == "step":
            current = float(ph.rate)
            measured.append(Segment(at, nxt, current, current, f"{current:g}/s"))
        elif ph.kind == "ramp":
            target = float(ph.rate)
            end = min(at + ph.duration_s, nxt)
            measured.append(Segment(at, end, current, target, f"ramp {current:g}→{target:g}/s"))
            current = target
            if end < nxt:
                measured.append(Segment(end, nxt, current, current, f"{current:g}/s"))
        elif ph.kind == "spike":
            factor = float(ph.factor)
            end = min(at + ph.duration_s, nxt)
            measured.append(Segment(at, end, current * factor, current * factor, f"spike ×{factor:g} "
                                    f"({current * factor:g}/s)"))
            if end < nxt:
                measured.append(Segment(end, nxt, current, current, f"after spike {current:g}/s"))
        else:
            raise ValueError(f"unknown phase kind {ph.kind!r}")
        t = nxt
    if t < duration_s:
        measured.append(Segment(t, duration_s, current, current, f"{current:g}/s"))
    measured = [s for s in measured if s.width_s > 0]
    out = [Segment(0.0, warmup_s, measured[0].rate_start, measured[0].rate_start, "warm-up")] if warmup_s > 0 else []
    return out + [Segment(s.start_s + warmup_s, s.end_s + warmup_s, s.rate_start, s.rate_end, s.name)
                  for s in measured]
