"""The saturation monitor tells a generator that fell behind from a host's transient stall."""
from __future__ import annotations

import numpy as np

from harness.worker.saturation import SaturationMonitor, judge_windows, longest_late_episode

MS = 1_000_000
THRESHOLD = 5 * MS


def feed(monitor: SaturationMonitor, start_s: float, lags_ms: np.ndarray, rate: float = 500.0) -> None:
    """One window of sends at `rate`/s starting at `start_s`, with the given lags; then close it."""
    for k, lag in enumerate(lags_ms):
        monitor.observe_send(int((start_s + k / rate) * 1e9), int(lag * MS), in_flight=1)
    monitor.close_window()


def clean(n: int = 500, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.05, 1.0, n)


def stalled(n: int = 500, stall_ms: float = 30.0, at: int = 200, rate: float = 500.0) -> np.ndarray:
    """A host stall of `stall_ms` at send `at`: the sends due during it go out together when it ends."""
    lags = clean(n)
    due_in_stall = int(stall_ms / 1000 * rate)
    lags[at:at + due_in_stall] = stall_ms - np.arange(due_in_stall) * 1000 / rate
    return lags


def monitor() -> SaturationMonitor:
    return SaturationMonitor("w0", THRESHOLD, max_in_flight=100)


def test_longest_late_episode_runs_from_first_intended_to_last_sent():
    intended = np.array([0, 10, 20, 30, 40, 50], dtype=np.int64) * MS
    lag = np.array([1, 9, 8, 1, 7, 1], dtype=np.int64) * MS
    late, longest = longest_late_episode(intended[::-1].copy(), lag[::-1].copy(), THRESHOLD)  # any order
    assert late == 3
    assert longest == (20 + 8 - 10) * MS  # sends 1-2: from 10 ms intended to 28 ms sent


def test_clean_windows_are_valid():
    m = monitor()
    for w in range(5):
        feed(m, w, clean(seed=w))
    assert m.verdict() == ([], [])
    assert len(m.windows) == 5 and m.max_lag_p99_ns < THRESHOLD


def test_an_isolated_stall_is_a_warning_not_saturation():
    m = monitor()
    feed(m, 0, clean())
    feed(m, 1, stalled(stall_ms=30))
    feed(m, 2, clean())
    reasons, warnings = m.verdict()
    assert reasons == []
    assert len(warnings) == 1 and "transient stall" in warnings[0] and "w0" in warnings[0]
    assert m.windows[1].lagging and 20 <= m.windows[1].longest_episode_ns / MS <= 31


def test_lag_in_consecutive_windows_is_saturation():
    m = monitor()
    feed(m, 0, clean())
    feed(m, 1, stalled(stall_ms=30))
    feed(m, 2, stalled(stall_ms=40, at=100))
    reasons, warnings = m.verdict()
    assert warnings == []
    assert len(reasons) == 1 and "2 consecutive windows" in reasons[0] and "saturated" in reasons[0]


def test_falling_behind_within_one_window_is_saturation():
    """A generator that cannot keep up: lag grows without bound (the whole run may be one window)."""
    m = monitor()
    growing = np.linspace(0, 400, 500)  # 0.4 ms more behind with each send
    feed(m, 0, growing)
    m.close_window(final=True)
    reasons, _ = m.verdict()
    assert len(reasons) == 1 and "late for" in reasons[0] and "saturated" in reasons[0]


def test_windows_hold_at_least_min_samples_except_the_last():
    m = monitor()
    for k in range(499):
        m.observe_send(k * MS, MS, 1)
    m.close_window()
    assert m.windows == []  # still open: a p99 of 499 sends waits for more
    m.close_window(final=True)
    assert len(m.windows) == 1 and m.windows[0].sends == 499
    m.observe_send(500 * MS, MS, 1)
    m.close_window(final=True)
    assert len(m.windows) == 1  # fewer than 20 at the end: too few for a p99


def test_in_flight_bound_invalidates_once():
    m = monitor()
    for in_flight in (50, 101, 150, 99):
        m.observe_send(0, 0, in_flight)
    reasons, _ = m.verdict()
    assert reasons == ["w0: 101 requests in flight exceeds the bound 100 (generator or endpoint cannot keep up)"]
    assert m.peak_in_flight == 150


def test_judge_windows_reports_each_streak():
    def window(start: float, lagging: bool, episode_ms: float = 10):
        from harness.worker.saturation import LagWindow
        return LagWindow(start, start + 1, 500, (9 if lagging else 1) * MS, 5 if lagging else 0,
                         int(episode_ms * MS) if lagging else 0, lagging)

    windows = [window(0, True), window(1, False), window(2, True), window(3, True), window(4, False),
               window(5, True, episode_ms=600)]
    reasons, warnings = judge_windows("w1", windows, THRESHOLD, stall_max_ns=250 * MS)
    assert len(warnings) == 1 and "0.0–1.0 s" in warnings[0]
    assert len(reasons) == 2
    assert "2 consecutive windows (2.0–4.0 s" in reasons[0]
    assert "late for 600 ms" in reasons[1]
