"""Is a generator keeping up? Its backlog's trend, told apart from the host's stalls and jitter.

A generator that cannot sustain its rate falls further and further behind: the lag of its latest sends (its
backlog) is above the threshold at the end of window after window, and grows. A shared or busy host stalls
every process now and then for a few to tens of ms; the sends due then go out late together and the
generator catches up: its backlog is back near zero by the window's end. Both raise a window's send-lag
p99. Only the first makes the run INVALID (the offered load was not the planned one); the second is a
warning, because its lag is already inside the latencies, which are measured from the intended send time.

Per window: the p99 send lag, the longest episode of late sends (consecutive late sends in intended order,
from the first one's intended time to the last one's actual send), and the backlog (the median lag of the
window's last sends). The verdict:
- saturated (INVALID): the backlog is above the threshold at the end of two or more consecutive windows and
  either grew across them or the last ends `behind_max_s` or more after the first (a generator behind at every
  window's end for that long did not deliver the planned arrivals, whatever its backlog did in between), or it is
  at least
  `stall_max_ms` at the end of the run;
- paused / stalled (INVALID): a send that went out `stall_max_ms` or more late, in a block the generator then
  caught up on — the process was stopped or starved (SIGSTOP, a long host stall), not overloaded. Judged by
  the largest lag, not by how long a block lasts: a core shared with a CPU hog makes many consecutive sends
  a few ms late (a long block of small lags), which is jitter, not a pause;
- a lagging window otherwise (p99 above the threshold): a warning, never INVALID.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from tailrace.contract.generator_limits import IN_FLIGHT, SATURATED, STALLED


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
    backlog_ns: int = 0  # the median lag of the window's last sends: how far behind it ended
    max_lag_ns: int = 0  # the latest send: a process stopped for T sends the first arrival due T late

    def behind(self, threshold_ns: int) -> bool:
        return self.backlog_ns > threshold_ns

    def as_dict(self) -> dict:
        return {"start_s": round(self.start_s, 3), "end_s": round(self.end_s, 3), "sends": self.sends,
                "p99_ms": self.p99_ns / 1e6, "late_sends": self.late_sends,
                "longest_episode_ms": self.longest_episode_ns / 1e6, "backlog_ms": self.backlog_ns / 1e6,
                "max_lag_ms": self.max_lag_ns / 1e6, "lagging": self.lagging}


def longest_late_episode(intended_ns: np.ndarray, lag_ns: np.ndarray, threshold_ns: int,
                         order: np.ndarray | None = None) -> tuple[int, int]:
    """(late sends, longest episode ns): an episode is consecutive late sends in intended order (`order`: the
    sends' intended order, when already known)."""
    order = np.argsort(intended_ns, kind="stable") if order is None else order
    t, lag = intended_ns[order], lag_ns[order]
    late = lag > threshold_ns
    if not late.any():
        return 0, 0
    # boundaries of runs of True in `late`
    edges = np.diff(np.concatenate(([0], late.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    durations = (t[ends] + lag[ends]) - t[starts]
    return int(late.sum()), int(durations.max())


def backlog(intended_ns: np.ndarray, lag_ns: np.ndarray, order: np.ndarray | None = None) -> int:
    """How far behind the window ended: the median lag of its last 10% of sends (at least 5), by intended time."""
    order = np.argsort(intended_ns, kind="stable") if order is None else order
    tail = max(5, len(order) // 10)
    return int(np.median(lag_ns[order][-tail:]))


def summarize_window(intended_ns: np.ndarray, lag_ns: np.ndarray, threshold_ns: int) -> LagWindow:
    """Close one window: its p99 send lag, its longest episode of late sends, its backlog at the end."""
    p99 = int(np.percentile(lag_ns, 99))
    order = np.argsort(intended_ns, kind="stable")
    late, longest = longest_late_episode(intended_ns, lag_ns, threshold_ns, order)
    return LagWindow(start_s=float(intended_ns.min()) / 1e9, end_s=float(intended_ns.max()) / 1e9,
                     sends=int(len(lag_ns)), p99_ns=p99, late_sends=late, longest_episode_ns=longest,
                     lagging=p99 > threshold_ns, backlog_ns=backlog(intended_ns, lag_ns, order),
                     max_lag_ns=int(lag_ns.max()))


def _streaks(flags: list[bool]) -> list[tuple[int, int]]:
    """(first, last) index of each run of True."""
    out, i = [], 0
    while i < len(flags):
        if flags[i]:
            j = i
            while j + 1 < len(flags) and flags[j + 1]:
                j += 1
            out.append((i, j))
            i = j + 1
        else:
            i += 1
    return out


def saturation_reasons(worker: str, windows: list[LagWindow], threshold_ns: int, stall_max_ns: int,
                       behind_max_ns: int = 2_000_000_000) -> list[str]:
    """A growing backlog over consecutive windows, consecutive windows behind for `behind_max_ns` or longer, or a
    run that ends far behind: the generator saturated."""
    reasons = []
    for i, j in _streaks([w.behind(threshold_ns) for w in windows]):
        first, last = windows[i], windows[j]
        span = f"{first.start_s:.1f}–{last.end_s:.1f} s"
        backlogs = ", ".join(f"{w.backlog_ns / 1e6:.0f}" for w in windows[i:j + 1])
        if j > i and last.backlog_ns >= first.backlog_ns:
            reasons.append(f"{worker}: falling behind — the backlog grew from {first.backlog_ns / 1e6:.1f} to "
                           f"{last.backlog_ns / 1e6:.1f} ms over {j - i + 1} consecutive windows ({span} into the "
                           f"run; {SATURATED})")
        elif j > i and (last.end_s - first.end_s) * 1e9 >= behind_max_ns:
            reasons.append(f"{worker}: behind schedule at the end of {j - i + 1} consecutive windows ({span} into the "
                           f"run, backlog {backlogs} ms): still behind {last.end_s - first.end_s:.1f} s after it "
                           f"first was — {SATURATED}")
        elif j == len(windows) - 1 and last.backlog_ns >= stall_max_ns:
            reasons.append(f"{worker}: {last.backlog_ns / 1e6:.0f} ms behind schedule when the run ended "
                           f"({span} into the run; {SATURATED})")
    return reasons


def judge_windows(worker: str, windows: list[LagWindow], threshold_ns: int, stall_max_ns: int,
                  behind_max_ns: int = 2_000_000_000) -> tuple[list[str], list[str]]:
    """(invalid reasons, warnings) for a worker's closed windows, in order."""
    reasons = saturation_reasons(worker, windows, threshold_ns, stall_max_ns, behind_max_ns)
    warnings = []
    limit = f"{threshold_ns / 1e6:g} ms"
    if not reasons:  # a saturated generator's late episodes are its backlog, not pauses
        for w in windows:
            if w.max_lag_ns >= stall_max_ns:
                reasons.append(f"{worker}: {STALLED} for {w.max_lag_ns / 1e9:.2f} s "
                               f"({w.start_s:.1f}–{w.end_s:.1f} s into the run): a send went out that late, in a "
                               f"block of {w.late_sends} late sends that it then caught up on — the process was "
                               f"stopped or starved, not overloaded; the planned arrivals were not sent as planned")
    lagging = [w for w in windows if w.lagging and w.max_lag_ns < stall_max_ns]
    if lagging and not reasons:
        worst = max(lagging, key=lambda w: w.p99_ns)
        longest = max(w.longest_episode_ns for w in lagging)
        warnings.append(f"{worker}: transient stalls — send lag p99 up to {worst.p99_ns / 1e6:.1f} ms > {limit} in "
                        f"{len(lagging)} of {len(windows)} windows (worst {worst.start_s:.1f}–{worst.end_s:.1f} s "
                        f"into the run; the longest run of late sends {longest / 1e6:.0f} ms); the generator kept "
                        f"up (no growing backlog). Their lag is part of the measured latencies.")
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
    behind_max_ns: int = 2_000_000_000
    min_samples: int = 500
    windows: list[LagWindow] = field(default_factory=list)
    peak_in_flight: int = 0
    _intended: array = field(default_factory=lambda: array("q"))  # read by numpy without a copy
    _lags: array = field(default_factory=lambda: array("q"))
    _in_flight_reason: str | None = None

    def __post_init__(self) -> None:
        # numpy's first percentile costs ~15-19 ms (lazy set-up): here, not when the first window closes mid-run
        summarize_window(np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64), self.threshold_ns)

    def observe_send(self, intended_ns: int, lag_ns: int, in_flight: int) -> None:
        self._intended.append(intended_ns)
        self._lags.append(lag_ns)
        if in_flight > self.peak_in_flight:
            self.peak_in_flight = in_flight
        if in_flight > self.max_in_flight and self._in_flight_reason is None:
            self._in_flight_reason = (f"{self.worker}: {in_flight} {IN_FLIGHT} "
                                      f"{self.max_in_flight} (generator or endpoint cannot keep up)")

    def close_window(self, final: bool = False) -> None:
        """Close the open window if it holds enough sends (at the end, any 20 or more)."""
        if len(self._lags) < (20 if final else self.min_samples):
            return
        self.windows.append(summarize_window(np.frombuffer(self._intended, dtype=np.int64),
                                             np.frombuffer(self._lags, dtype=np.int64), self.threshold_ns))
        self._intended, self._lags = array("q"), array("q")

    @property
    def max_lag_p99_ns(self) -> int:
        return max((w.p99_ns for w in self.windows), default=0)

    def verdict(self) -> tuple[list[str], list[str]]:
        """(invalid reasons, warnings) over the windows closed so far."""
        reasons, warnings = judge_windows(self.worker, self.windows, self.threshold_ns, self.stall_max_ns,
                                           self.behind_max_ns)
        if self._in_flight_reason:
            reasons.append(self._in_flight_reason)
        return reasons, warnings
