"""The rate function of a run: piecewise linear over steps, ramps and spikes (one segment per phase of the
report). The generator draws its arrivals from it; the analysis names phases and intended rates by it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailrace.contract.profile import Phase


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


def _required(setting: float | None) -> float:
    """A phase's setting that its kind needs (contract/profile/'s Phase has checked it is there)."""
    if setting is None:
        raise ValueError("a phase lacks a setting its kind needs")
    return float(setting)


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
            current = _required(ph.rate)
            measured.append(Segment(at, nxt, current, current, f"{current:g}/s"))
        elif ph.kind == "ramp":
            target = _required(ph.rate)
            end = min(at + _required(ph.duration_s), nxt)
            measured.append(Segment(at, end, current, target, f"ramp {current:g}→{target:g}/s"))
            current = target
            if end < nxt:
                measured.append(Segment(end, nxt, current, current, f"{current:g}/s"))
        elif ph.kind == "spike":
            factor = _required(ph.factor)
            end = min(at + _required(ph.duration_s), nxt)
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


def describe_arrivals(load) -> str:
    """The arrival process in words: 'Poisson 200 req/s', 'gamma (cv 2) 200 req/s', 'on/off 50/5 req/s …'."""
    a = load.arrivals
    if a.process == "trace":
        t = a.trace
        return (f"trace {t.file} ×{t.time_scale:g}" + (f" from {t.start_s:g} s" if t.start_s else "")
                + (f", {t.window_s:g} s window" if t.window_s else "") + (", looped" if t.loop else ""))
    if a.process == "onoff":
        return (f"on/off {a.on_rate:g}/s for ~{a.on_s:g} s, {a.off_rate:g}/s for ~{a.off_s:g} s "
                f"(mean {a.mean_rate:.3g}/s)")
    kind = f"gamma (cv {a.cv:g})" if a.process == "gamma" else {"poisson": "Poisson", "constant": "constant"}[a.process]
    return f"{kind} {load.rate:g} req/s" + (f" with {len(load.phases)} phase change(s)" if load.phases else "")


def load_segments(load, warmup_s: float | None = None) -> list[Segment]:
    """The server scenario's rate segments, whatever its process: the profile's rate and phases; an on/off
    process's long-run mean rate; a trace one segment of unknown rate (0: its rate is the trace's)."""
    warmup = load.warmup_s if warmup_s is None else warmup_s
    a = load.arrivals
    if a.process in ("onoff", "trace"):
        rate = a.mean_rate if a.process == "onoff" else 0.0
        name = "trace replay" if a.process == "trace" else f"on/off (mean {rate:.3g}/s)"
        out = [Segment(0.0, warmup, rate, rate, "warm-up")] if warmup > 0 else []
        return out + [Segment(warmup, warmup + load.duration_s, rate, rate, name)]
    return rate_segments(load.rate, load.phases, warmup, load.duration_s)
