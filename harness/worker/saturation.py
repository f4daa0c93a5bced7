"""Is a generator keeping up? Send lag per window, told apart from the host's transient stalls.

A generator that cannot sustain its rate falls behind and stays behind: its send lag is high window after
window, and late sends follow each other for as long as the overload lasts. A shared or busy host also
stalls every process now and then for a few to tens of ms; the sends due in that moment go out late
together, and the next window is clean again. Both raise one window's p99. The first makes the run
INVALID (the offered load was not the planned one); the second is reported as a warning (its lag is
already in the latencies, which are measured from the intended send time).

A window lags when its send-lag p99 exceeds the threshold. A lagging window means saturation when the
window next to it lags too, or when the late sends inside it form one episode of at least `stall_max_ms`
(a single window may be the whole run). An episode is a run of consecutive late sends (in intended order),
from the first one's intended time to the last one's actual send.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class LagWindow:
    """One closed window of sends (times in seconds since the start instant)."""

    start_s: float
    end_s: float
    sends: int
    p99_ns: int
    late_sends: int
    longest_episode_ns: int
    lagging: bool

    def as_dict(self) -> dict:
        return {"start_s": round(self.start_s, 3), "end_s": round(self.end_s, 3), "sends": self.sends,
                "p99_ms": self.p99_ns / 1e6, "late_sends": self.late_sends,
                "longest_episode_ms": self.longest_episode_ns / 1e6, "lagging": self.lagging}


def longest_late_episode(intended_ns: np.ndarray, lag_ns: np.ndarray, threshold_ns: int) -> tuple[int, int]:
    """(late sends, longest episode ns): an episode is consecutive late sends in intended order."""
    order = np.argsort(intended_ns, kind="stable")
    t, lag = intended_ns[order], lag_ns[order]
    late = lag > threshold_ns
    if not late.any():
        return 0, 0
    # boundaries of runs of True in `late`
    edges = np.diff(np.concatenate(([0], late.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    durations = (t[ends] + lag[ends]) - t[starts]
    return int(late.sum()), int(durations.max())


def summarize_window(intended_ns: np.ndarray, lag_ns: np.ndarray, threshold_ns: int) -> LagWindow:
    """Close one window: its p99 send lag and its longest episode of late sends."""
    p99 = int(np.percentile(lag_ns, 99))
    late, longest = longest_late_episode(intended_ns, lag_ns, threshold_ns)
    return LagWindow(start_s=float(intended_ns.min()) / 1e9, end_s=float(intended_ns.max()) / 1e9,
                     sends=int(len(lag_ns)), p99_ns=p99, late_sends=late, longest_episode_ns=longest,
                     lagging=p99 > threshold_ns)


def judge_windows(worker: str, windows: list[LagWindow], threshold_ns: int,
                  stall_max_ns: int) -> tuple[list[str], list[str]]:
    """(invalid reasons, warnings) for a worker's closed windows, in order."""
    reasons, warnings = [], []
    limit = f"{threshold_ns / 1e6:g} ms"
    i = 0
    while i < len(windows):
        if not windows[i].lagging:
            i += 1
            continue
        j = i
        while j + 1 < len(windows) and windows[j + 1].lagging:
            j += 1
        streak = windows[i:j + 1]
        worst = max(streak, key=lambda w: w.p99_ns)
        longest = max(w.longest_episode_ns for w in streak)
        span = f"{streak[0].start_s:.1f}–{streak[-1].end_s:.1f} s"
        if len(streak) > 1:
            reasons.append(f"{worker}: send lag p99 up to {worst.p99_ns / 1e6:.1f} ms > {limit} in {len(streak)} "
                           f"consecutive windows ({span} into the run; generator saturated)")
        elif longest >= stall_max_ns:
            reasons.append(f"{worker}: send lag p99 {worst.p99_ns / 1e6:.1f} ms > {limit} in the window {span} "
                           f"into the run, late for {longest / 1e6:.0f} ms on end (generator saturated)")
        else:
            warnings.append(f"{worker}: transient stall — send lag p99 {worst.p99_ns / 1e6:.1f} ms > {limit} in "
                            f"the window {span} into the run ({worst.late_sends} late sends, the longest run of "
                            f"them {longest / 1e6:.0f} ms; the windows around it kept up). Its lag is part of "
                            f"the measured latencies.")
        i = j + 1
    return reasons, warnings


@dataclass
class SaturationMonitor:
    """Send lag per window and the in-flight bound of one worker; says when the run is INVALID and why.

    Times are nanoseconds since the start instant. Windows close on a timer but hold at least `min_samples`
    sends (a p99 of fewer sends is one of their few largest).
    """

    worker: str
    threshold_ns: int
    max_in_flight: int
    stall_max_ns: int = 250_000_000
    min_samples: int = 500
    windows: list[LagWindow] = field(default_factory=list)
    peak_in_flight: int = 0
    _intended: list[int] = field(default_factory=list)
    _lags: list[int] = field(default_factory=list)
    _in_flight_reason: str | None = None

    def observe_send(self, intended_ns: int, lag_ns: int, in_flight: int) -> None:
        self._intended.append(intended_ns)
        self._lags.append(lag_ns)
        if in_flight > self.peak_in_flight:
            self.peak_in_flight = in_flight
        if in_flight > self.max_in_flight and self._in_flight_reason is None:
            self._in_flight_reason = (f"{self.worker}: {in_flight} requests in flight exceeds the bound "
                                      f"{self.max_in_flight} (generator or endpoint cannot keep up)")

    def close_window(self, final: bool = False) -> None:
        """Close the open window if it holds enough sends (at the end, any 20 or more)."""
        if len(self._lags) < (20 if final else self.min_samples):
            return
        self.windows.append(summarize_window(np.asarray(self._intended, dtype=np.int64),
                                             np.asarray(self._lags, dtype=np.int64), self.threshold_ns))
        self._intended, self._lags = [], []

    @property
    def max_lag_p99_ns(self) -> int:
        return max((w.p99_ns for w in self.windows), default=0)

    def verdict(self) -> tuple[list[str], list[str]]:
        """(invalid reasons, warnings) over the windows closed so far."""
        reasons, warnings = judge_windows(self.worker, self.windows, self.threshold_ns, self.stall_max_ns)
        if self._in_flight_reason:
            reasons.append(self._in_flight_reason)
        return reasons, warnings
