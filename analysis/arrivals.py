"""Was the load really Poisson? KS test and index of dispersion of the actual send gaps, per worker and merged."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from analysis.frames import take
from analysis.stats import index_of_dispersion, ks_exponential


def _row(name: str, times_ns: np.ndarray) -> dict:
    t = np.sort(times_ns) / 1e9
    gaps = np.diff(t)
    ks = ks_exponential(gaps)
    return {"source": name, "count": int(len(t)), "rate": float(len(t) / (t[-1] - t[0])) if len(t) > 1 else None,
            "ks_statistic": ks[0] if ks else None, "ks_pvalue": ks[1] if ks else None,
            "poisson_ok": bool(ks and ks[1] > 0.01), "index_of_dispersion": index_of_dispersion(t)}


def arrival_checks(df: pd.DataFrame) -> list[dict]:
    """Per worker and merged (reference time), per constant-rate phase: actual send gaps vs the exponential."""
    rows = []
    sent, sent_ref = df["t_sent"].to_numpy(), df["t_sent_ref"].to_numpy()
    by_phase = df.groupby("phase", sort=False).indices
    by_worker = df.groupby(["phase", "worker"], observed=True, sort=False).indices
    tasks = []
    for phase in sorted(by_phase):
        if phase == 0:
            continue
        for worker in sorted((w for p, w in by_worker if p == phase), key=str):
            tasks.append((int(phase), worker, take(sent, by_worker[(phase, worker)])))
        tasks.append((int(phase), "merged", take(sent_ref, by_phase[phase])))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # the sorts release the GIL
        rows = list(pool.map(lambda t: {"phase": t[0], **_row(t[1], t[2])}, tasks))
    return rows
