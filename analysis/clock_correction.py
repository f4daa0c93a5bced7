"""Clock correction: fit each worker's offset to the reference over time from its NTP samples.

Samples whose round-trip delay is well above the worker's minimum are dropped (queueing makes them
asymmetric, hence biased); the rest are fit with a robust line (Theil–Sen: offset drifts linearly with
a worker's frequency error), or taken as their median when there are too few. Timestamps map to
reference time as t_ref = t_local + offset(t_local). Durations need no correction.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from analysis.frames import as_slice, frame_of, group_positions


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

    def to_reference(self, local_ns) -> np.ndarray:
        """Map worker-clock epoch ns to reference epoch ns."""
        t = np.asarray(local_ns, dtype=np.int64)
        return t + np.round(self.offset_at(t)).astype(np.int64)

    def as_dict(self) -> dict:
        return {"worker": self.worker, "offset_ms": self.intercept_ns / 1e6, "drift_ppm": self.slope * 1e6,
                "uncertainty_ms": self.uncertainty_ns / 1e6, "samples_used": self.samples_used,
                "samples_total": self.samples_total}


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
        slope, intercept, _, _ = stats.theilslopes(o, (t - t0).astype(np.float64))
    else:
        slope, intercept = 0.0, float(np.median(o))
    residual = o - (intercept + slope * (t - t0))
    uncertainty = max(float(np.median(np.abs(residual))) if len(residual) else 0.0,
                      float(kept["delay_ns"].min()) / 2)
    return OffsetModel(worker, t0, float(intercept), float(slope), uncertainty, int(len(kept)), int(len(s)))


def fit_all(clock: pd.DataFrame) -> dict[str, OffsetModel]:
    """One model per worker (the first server's samples: that is the reference)."""
    models = {}
    if clock.empty:
        return models
    first_server = clock["server"].iloc[0]
    for worker, g in clock[clock["server"] == first_server].groupby("worker"):
        models[worker] = fit_offset(worker, g)
    return models


def add_reference_times(requests: pd.DataFrame, models: dict[str, OffsetModel]) -> pd.DataFrame:
    """Add t_intended_ref, t_sent_ref, t_done_ref (epoch ns on the reference clock) and clock_error_ns.

    Workers without clock samples fall back to the offset stamped on each row.
    """
    columns = ("t_intended", "t_sent", "t_done")
    refs = {col: np.zeros(len(requests), dtype=np.int64) for col in columns}
    error = np.full(len(requests), np.nan)
    for worker, rows in group_positions(requests, ["worker"]).items():
        idx = as_slice(rows)  # one worker's chunks are read one after another: usually contiguous
        model = models.get(worker)
        for col in columns:
            local = requests[col].to_numpy()[idx]
            if model is not None and model.samples_used:
                refs[col][idx] = model.to_reference(local)
            else:
                refs[col][idx] = local + requests["clock_offset_ns"].to_numpy()[idx]
        error[idx] = model.uncertainty_ns if model is not None else np.nan
    # a new frame of the request columns (shared, never copied) and the new ones: inserting columns one by one
    # into a frame of ten million rows costs pandas a quarter of a second each
    return frame_of({**{name: requests[name] for name in requests.columns},
                     **{col + "_ref": refs[col] for col in columns}, "clock_error_ns": error}, requests.index)
