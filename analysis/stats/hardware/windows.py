"""A measured phase's window and what a cumulative series (joules, CPU-seconds) rose by in it, whole and in equal
parts per request sent (the samples of an interval) — pure functions."""
from __future__ import annotations

from typing import Iterable, NamedTuple

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import strings
from tailrace.analysis.stats.sorting import TIME_SORT

WINDOWS = 10  # a phase's sub-windows for the interval of its energy per request (tailrace compare)


class PhaseWindow(NamedTuple):
    """A measured phase: its window (the reference clock, ns) and, per endpoint, its ok requests' intended sends
    (sorted), their output tokens and mean server compute time (ms; None: not reported)."""

    phase: int
    t0: int
    t1: int
    intended: dict[str, np.ndarray]
    tokens: dict[str, int]
    compute_ms: dict[str, float | None]

    def requests_of(self, endpoints: Iterable[str] | None = None) -> int:
        return sum(len(v) for e, v in self.intended.items() if endpoints is None or e in endpoints)

    def tokens_of(self, endpoints: Iterable[str] | None = None) -> int:
        return sum(v for e, v in self.tokens.items() if endpoints is None or e in endpoints)

    def intended_of(self, endpoints: Iterable[str] | None = None) -> np.ndarray:
        parts = [v for e, v in self.intended.items() if endpoints is None or e in endpoints]
        return np.sort(np.concatenate(parts), kind=TIME_SORT) if parts else np.empty(0, dtype=np.int64)


def phase_windows(df: pd.DataFrame) -> list[PhaseWindow]:
    """Each measured phase's window — from its first intended send to its last response, every endpoint's — and
    its ok requests per endpoint (pure)."""
    out = []
    ok = (df["status"] == "ok").to_numpy()
    phase, endpoint = df["phase"].to_numpy(), strings(df["endpoint"])
    intended = df["t_intended_ref"].to_numpy()
    tokens = df["output_tokens"].to_numpy() if "output_tokens" in df else np.zeros(len(df), dtype=np.int64)
    compute = df["server_compute_ns"].to_numpy() if "server_compute_ns" in df else np.full(len(df), -1)
    for k in sorted(int(p) for p in np.unique(phase) if p > 0):
        rows = phase == k
        served = rows & ok
        by_endpoint, token_counts, compute_ms = {}, {}, {}
        for e in np.unique(endpoint[served]):
            mine = served & (endpoint == e)
            by_endpoint[str(e)] = np.sort(intended[mine], kind=TIME_SORT)  # integers: the same by any sort
            t = tokens[mine]
            token_counts[str(e)] = int(t[t > 0].sum())
            c = compute[mine]
            c = c[c >= 0]
            compute_ms[str(e)] = float(c.mean() / 1e6) if len(c) else None
        out.append(PhaseWindow(k, int(intended[rows].min()), int(df["t_done_ref"].to_numpy()[rows].max()),
                               by_endpoint, token_counts, compute_ms))
    return out


def between(t_ns: np.ndarray, cumulative: np.ndarray | None, t0: int, t1: int) -> float | None:
    """How much a cumulative series (joules, CPU-seconds) rose between t0 and t1, interpolated between scrapes
    (None: the scrapes do not cover [t0, t1]) — pure."""
    if cumulative is None or len(t_ns) < 2 or t0 < t_ns[0] or t1 > t_ns[-1]:
        return None
    return float(np.interp(t1, t_ns, cumulative) - np.interp(t0, t_ns, cumulative))


def per_request_windows(t_ns: np.ndarray, cumulative: np.ndarray | None, intended: np.ndarray, t0: int, t1: int,
                        k: int = WINDOWS) -> list[float]:
    """The window [t0, t1] cut in `k` equal parts: in each, the cumulative series' rise × 1,000 per request sent in
    it (mJ per request from joules) — the samples an interval rests on (a part without requests is left out)."""
    if cumulative is None or len(intended) == 0:
        return []
    edges = np.linspace(t0, t1, k + 1).astype(np.int64)
    counts = np.diff(np.searchsorted(intended, edges, side="left"))
    out = []
    for i in range(k):
        rise = between(t_ns, cumulative, int(edges[i]), int(edges[i + 1]))
        if rise is not None and counts[i] > 0:
            out.append(rise * 1e3 / counts[i])
    return out
