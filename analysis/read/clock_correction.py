"""Clock correction: fit each worker's offset to the reference over time from its NTP samples.

Samples whose round-trip delay is well above the worker's minimum are dropped (queueing makes them
asymmetric, hence biased); the rest are fit with a robust line (Theil–Sen, scipy's to the bit: offset drifts
linearly with a worker's frequency error), or taken as their median when there are too few. Timestamps map to
reference time as t_ref = t_local + offset(t_local). Durations need no correction.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import frame_of
from tailrace.analysis.read.threads import map_in_threads
from tailrace.contract.summary.tables import ClockRow

CLOCK_BLOCK = 1 << 22  # values a clock correction computes at a time (32 MB of floats; see to_reference)
PAIRS_BLOCK = 1 << 21  # sample pairs theil_sen differences at a time (16 MB a temporary)


def theil_sen(y: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of scipy.stats.theilslopes(y, x) — the median of the slopes between every two samples
    with x_i > x_j, and median(y) − slope · median(x) — to the bit, without its interval. scipy makes the n × n
    differences whole and sorts the n²/2 slopes for the interval: a day's run's 3,335 clock samples a worker took
    0.5–0.9 s and 0.3 GB a worker (0.12 s here). Here the same slopes (the same subtractions and divisions) are
    made a block of rows at a time and their median selected, not sorted: the same two middle values, the same mean."""
    y, x = np.asarray(y, dtype=np.float64).ravel(), np.asarray(x, dtype=np.float64).ravel()
    rows = max(1, PAIRS_BLOCK // max(len(x), 1))
    parts = []
    for start in range(0, len(x), rows):
        dx = x[start:start + rows, np.newaxis] - x
        dy = y[start:start + rows, np.newaxis] - y
        ahead = dx > 0
        parts.append(dy[ahead] / dx[ahead])
    slope = np.median(np.concatenate(parts)) if parts else np.float64(np.nan)
    return float(slope), float(np.median(y) - slope * np.median(x))


@dataclass(frozen=True)
class OffsetModel:
    """offset(t) = intercept + slope · (t − t0), all in ns; uncertainty in ns."""

    worker: str
    t0_ns: int
    intercept_ns: float
    slope: float  # ns of offset per ns of local time (frequency error)
    uncertainty_ns: float
    samples_used: int
    samples_total: int

    def offset_at(self, local_ns) -> np.ndarray:
        t = np.asarray(local_ns, dtype=np.float64)
        return self.intercept_ns + self.slope * (t - self.t0_ns)

    def to_reference(self, local_ns, out: np.ndarray | None = None) -> np.ndarray:
        """Map worker-clock epoch ns to reference epoch ns (into `out` when given: int64, as long). offset_at's
        arithmetic in place, operation for operation, CLOCK_BLOCK values at a time: the same values, with a
        temporary of at most a block, not of the whole column (a day's run: 100 M rows, 0.12 → 0.09 s a worker's
        16.7 M). Blocks are large: each numpy step lets go of the GIL and must take it back, which another thread
        computing in Python holds for up to the switch interval — 16.7 M rows in blocks of 65,536 took 2.2 s beside a
        busy thread, against 0.16 s whole and 0.25 s in blocks of 4 M (docs/DECISIONS.md)."""
        t = np.asarray(local_ns, dtype=np.int64)
        out = np.empty(len(t), dtype=np.int64) if out is None else out
        offset = np.empty(min(CLOCK_BLOCK, len(t)), dtype=np.float64)
        for start in range(0, len(t), CLOCK_BLOCK):
            stop = min(start + CLOCK_BLOCK, len(t))
            part, local, ref = offset[:stop - start], t[start:stop], out[start:stop]
            np.copyto(part, local, casting="unsafe")  # as astype(np.float64)
            part -= self.t0_ns
            part *= self.slope
            part += self.intercept_ns
            np.round(part, out=part)
            ref[...] = part  # whole numbers already: the cast truncates nothing
            ref += local
        return out

    def row(self) -> ClockRow:
        """The summary's row of this worker's clock."""
        return ClockRow(worker=self.worker, offset_ms=self.intercept_ns / 1e6, drift_ppm=self.slope * 1e6,
                        uncertainty_ms=self.uncertainty_ns / 1e6, samples_used=self.samples_used,
                        samples_total=self.samples_total)


def fit_offset(worker: str, samples: pd.DataFrame, delay_slack_ns: float = 200_000) -> OffsetModel:
    """Fit one worker's offset model from its clock samples (columns local_ns, offset_ns, delay_ns)."""
    if samples.empty:
        return OffsetModel(worker, 0, 0.0, 0.0, float("inf"), 0, 0)
    s = samples.sort_values("local_ns")
    min_delay = s["delay_ns"].min()
    kept = s[s["delay_ns"] <= 2 * min_delay + delay_slack_ns]
    t = kept["local_ns"].to_numpy(dtype=np.int64)
    o = kept["offset_ns"].to_numpy(dtype=np.float64)
    t0 = int(t[0])
    if len(kept) >= 4 and (t[-1] - t[0]) > 5e9:
        slope, intercept = theil_sen(o, (t - t0).astype(np.float64))
    else:
        slope, intercept = 0.0, float(np.median(o))
    residual = o - (intercept + slope * (t - t0))
    uncertainty = max(float(np.median(np.abs(residual))) if len(residual) else 0.0,
                      float(kept["delay_ns"].min()) / 2)
    return OffsetModel(worker, t0, float(intercept), float(slope), uncertainty, int(len(kept)), int(len(s)))


def fit_all(clock: pd.DataFrame) -> dict[str, OffsetModel]:
    """One model per worker (the first server's samples: that is the reference), fitted a core each at a time."""
    if clock.empty:
        return {}
    first_server = clock["server"].iloc[0]
    workers = list(clock[clock["server"] == first_server].groupby("worker"))
    fitted = map_in_threads(lambda item: fit_offset(*item), workers, os.cpu_count() or 1)
    return {worker: model for (worker, _), model in zip(workers, fitted)}


def worker_runs(workers: pd.Categorical) -> list[tuple[str, slice]]:
    """The rows of the request log as (worker, slice) runs: each worker's chunks are read one after another,
    so a worker's rows are a few contiguous runs. Rows without a worker belong to no run."""
    codes = np.asarray(workers.codes)
    if len(codes) == 0:
        return []
    bounds = np.concatenate([[0], np.flatnonzero(codes[1:] != codes[:-1]) + 1, [len(codes)]]).tolist()
    return [(workers.categories[codes[a]], slice(a, b)) for a, b in zip(bounds, bounds[1:]) if codes[a] >= 0]


def to_reference(local: np.ndarray, offsets: np.ndarray, runs: list[tuple[str, slice]],
                 models: dict[str, OffsetModel]) -> np.ndarray:
    """Local epoch-ns times (one per request) on the reference clock: a worker's rows by its fitted model, or,
    when it has none, by the offset stamped on each row (`offsets`). `runs`: worker_runs of the log, each written in
    place (a slice of the result) — several at once, one a core: a day's run derives such a column several times."""
    ref = np.zeros(len(local), dtype=np.int64)

    def one(run: tuple[str, slice]) -> None:
        worker, rows = run
        model = models.get(worker)
        if model is not None and model.samples_used:
            model.to_reference(local[rows], out=ref[rows])
        else:
            ref[rows] = local[rows] + offsets[rows]

    map_in_threads(one, runs, os.cpu_count() or 1)
    return ref


def add_reference_times(requests: pd.DataFrame, models: dict[str, OffsetModel]) -> pd.DataFrame:
    """`requests` with t_intended_ref, t_sent_ref, t_done_ref (epoch ns on the reference clock) and
    clock_error_ns (the worker's model uncertainty; NaN without a model) added — the whole log at once, for the
    Python API (analysis/analyze.py derives them one column at a time)."""
    runs = worker_runs(requests["worker"].array if isinstance(requests["worker"].dtype, pd.CategoricalDtype)
                       else pd.Categorical(requests["worker"]))
    offsets = requests["clock_offset_ns"].to_numpy()
    error = np.full(len(requests), np.nan)
    for worker, rows in runs:
        model = models.get(worker)
        error[rows] = model.uncertainty_ns if model is not None else np.nan
    return frame_of({**{name: requests[name] for name in requests.columns},
                     **{c + "_ref": to_reference(requests[c].to_numpy(), offsets, runs, models)
                        for c in ("t_intended", "t_sent", "t_done")}, "clock_error_ns": error}, requests.index)
