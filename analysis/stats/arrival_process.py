"""Was the load the process that was asked for? The delivered sends of a gamma, constant, on/off or trace run,
merged (reference time) and per worker, per measured phase, against that process:

- gamma / constant: the coefficient of variation of the gaps, with a 99% bootstrap interval (a renewal process's
  gaps are independent), against the asked cv — for a worker, against what thinning leaves of it: a share p of a
  renewal process with gap c² = cv² has gaps of c² = p·(cv² − 1) + 1 — with the measured send jitter added (a gap
  between two sends gains the change of the lag from one to the next: c² grows by var(Δlag)/mean gap²; what makes
  a constant process's sends a cv of ~0.08 rather than 0); and a KS test of the gaps against that gamma;
- on/off: the index of dispersion of counts in windows of one on/off cycle (on_s + off_s) against the model's,
  IDC(T) = 1 + 2·π_on·π_off·(λ_on − λ_off)²·p / (λ̄·θ²·T) · (θT − 1 + e^(−θT)), θ = 1/on_s + 1/off_s (Poisson: 1);
- trace: each request's send lag behind its trace instant (p50 / p99 / max), and the sends per second against the
  trace's per second (a figure). A row not sent is a planned request not sent: the run is INVALID for it already.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from tailrace.analysis.read.frames import group_positions
from tailrace.analysis.stats.scenarios import phase_names
from tailrace.analysis.stats.sorting import TIME_SORT
from tailrace.contract.profile import Profile
from tailrace.contract.summary.tables import ArrivalProcessRow

CV_TOLERANCE = 0.05  # a delivered cv within 5% of the asked one (beyond its interval) is the asked process: the
# 1 ms-scale send jitter of a real generator moves the cv of short gaps a little
ALIGNMENT_S = 0.001  # merged sends are on the reference clock: two regions' clocks agree to about a millisecond,
# which moves a merged gap by as much — a cv within ALIGNMENT_S / mean gap of the expected is the asked process
IDC_FACTOR = 2.0  # on/off: a delivered index of dispersion within this factor of the model's
BOOTSTRAP = 200
MAX_GAPS = 200_000


def expected_cv(cv: float, share: float) -> float:
    """The gap cv of a renewal process with gap cv `cv` thinned independently to `share` of its arrivals."""
    return math.sqrt(max(share * (cv ** 2 - 1) + 1, 0.0))


def cv_interval(gaps: np.ndarray, rng: np.random.Generator, level: float = 0.99) -> tuple[float, float, float]:
    """(cv, low, high) of independent gaps: the sample cv and its percentile-bootstrap interval."""
    cv = float(gaps.std() / gaps.mean())
    sample = rng.integers(0, len(gaps), (BOOTSTRAP, len(gaps)))
    drawn = gaps[sample]
    cvs = drawn.std(axis=1) / drawn.mean(axis=1)
    low, high = np.quantile(cvs, [(1 - level) / 2, (1 + level) / 2])
    return cv, float(low), float(high)


def onoff_idc(on_rate: float, off_rate: float, on_s: float, off_s: float, window_s: float, share: float = 1.0
              ) -> float:
    """The index of dispersion of counts in windows of `window_s` of an on/off (MMPP-2) process thinned to
    `share`."""
    theta = 1 / on_s + 1 / off_s
    p_on, p_off = on_s / (on_s + off_s), off_s / (on_s + off_s)
    mean = p_on * on_rate + p_off * off_rate
    x = theta * window_s
    return 1 + 2 * p_on * p_off * (on_rate - off_rate) ** 2 * share / (mean * theta ** 2 * window_s) * (x - 1 + math.exp(-x))


def counts_idc(times_s: np.ndarray, window_s: float) -> tuple[float | None, int]:
    """(variance / mean of the counts in consecutive windows, windows) of sorted times (None: fewer than 3)."""
    if len(times_s) < 2:
        return None, 0
    edges = np.arange(times_s[0], times_s[-1], window_s)
    if len(edges) < 4:
        return None, len(edges) - 1
    counts = np.histogram(times_s, bins=edges)[0]
    return (float(counts.var(ddof=1) / counts.mean()) if counts.mean() > 0 else None), len(counts)


def with_send_jitter(cv: float, lag_step_var_s2: float, mean_gap_s: float) -> float:
    """The gap cv of sends that leave at their intended instants plus a lag: each gap gains the change of the lag
    from one send to the next, whose variance is `lag_step_var_s2` (measured: consecutive lags are correlated, so
    it is not 2·var(lag))."""
    return math.sqrt(cv ** 2 + lag_step_var_s2 / mean_gap_s ** 2) if mean_gap_s > 0 else cv


def _renewal_row(gaps: np.ndarray, cv_process: float, lag_var_s2: float, rng: np.random.Generator) -> dict:
    if len(gaps) < 20 or gaps.mean() <= 0:
        return {"ok": None, "interpretation": "too few sends to test"}
    mean_gap = float(gaps.mean())
    cv_asked = with_send_jitter(cv_process, lag_var_s2, mean_gap)
    gaps = gaps[:: -(-len(gaps) // MAX_GAPS)]
    cv, low, high = cv_interval(gaps, rng)
    ok = low * (1 - CV_TOLERANCE) <= cv_asked <= high * (1 + CV_TOLERANCE) or abs(cv - cv_asked) <= max(
        CV_TOLERANCE * cv_asked, ALIGNMENT_S / mean_gap)
    row = {"measured": cv, "ci_low": low, "ci_high": high, "expected": cv_asked, "process_cv": cv_process,
           "statistic": "gap cv", "ok": ok}
    if cv_asked > 0.05:  # a gamma of that cv with the gaps' own mean
        shape = 1 / cv_asked ** 2
        row["ks_pvalue"] = float(stats.kstest(gaps, "gamma", args=(shape, 0, gaps.mean() / shape)).pvalue)
    row["interpretation"] = (f"gap cv {cv:.3g} [{low:.3g}, {high:.3g}] " + (
        f"matches the asked {cv_asked:.3g}" if ok else f"is not the asked {cv_asked:.3g}: the sends were not the "
        "process the profile asked for"))
    return row


def _trace_row(sent: np.ndarray, intended: np.ndarray, lag_ns: np.ndarray) -> dict:
    lag_ms = lag_ns / 1e6
    p50, p99, worst = (float(np.percentile(lag_ms, 50)), float(np.percentile(lag_ms, 99)), float(lag_ms.max())) \
        if len(lag_ms) else (None, None, None)
    start = min(intended.min(), sent.min()) if len(sent) else 0
    seconds = int((max(intended.max(), sent.max()) - start) // 1e9) + 1 if len(sent) else 0
    empty = np.zeros(0, dtype=np.int64)
    per_intended = np.bincount(((intended - start) // 1e9).astype(np.int64), minlength=seconds) if seconds else empty
    per_sent = np.bincount(((sent - start) // 1e9).astype(np.int64), minlength=seconds) if seconds else empty
    return {"statistic": "send lag behind the trace (ms)", "measured": p99, "lag_p50_ms": p50, "lag_p99_ms": p99,
            "lag_max_ms": worst, "expected": None, "ok": True,
            "per_second": {"trace": [int(v) for v in per_intended], "sent": [int(v) for v in per_sent]},
            "interpretation": (f"every send within {worst:.1f} ms of its trace instant (p50 {p50:.2f}, p99 {p99:.2f} ms)"
                               if worst is not None else "nothing sent")}


def _declared(value: float | None, name: str) -> float:
    """An arrival process's setting that profile validation requires for it."""
    if value is None:
        raise ValueError(f"load.arrivals.{name} is required by the process")
    return value


def process_checks(df: pd.DataFrame, profile: Profile | None) -> list[ArrivalProcessRow]:
    """Per measured phase, merged and per worker: the delivered sends against the asked process (gamma, constant,
    onoff, trace); [] for Poisson (analysis/stats/poisson_checks.py checks it) and the closed-loop scenarios."""
    if profile is None or profile.load.scenario != "server" or profile.load.arrivals.process == "poisson":
        return []
    a = profile.load.arrivals
    rng = np.random.default_rng(0)
    shares = {r.name: r.share / sum(x.share for x in profile.regions) / r.workers for r in profile.regions}
    measured = df[df["phase"].to_numpy() > 0]
    out: list[dict] = []
    sources = [("merged", np.arange(len(measured)), "t_sent_ref", "t_intended_ref", 1.0)]
    for key, rows in sorted(group_positions(measured, ["worker"]).items(), key=lambda kv: str(kv[0])):
        worker = key[0] if isinstance(key, tuple) else key
        region = str(measured["region"].iloc[rows[0]])
        sources.append((str(worker), rows, "t_sent", "t_intended", shares.get(region, 1.0)))
    phases = measured["phase"].to_numpy()
    for phase in sorted(set(phases.tolist())):
        for name, rows, sent_col, intended_col, share in sources:
            rows = rows[phases[rows] == phase]
            sent = np.sort(measured[sent_col].to_numpy()[rows], kind=TIME_SORT)  # integers: any sort
            intended = np.sort(measured[intended_col].to_numpy()[rows], kind=TIME_SORT)
            row = {"phase": int(phase), "source": name, "count": int(len(rows)), "process": a.process}
            if a.process in ("gamma", "constant"):
                asked = expected_cv(_declared(a.cv, "cv") if a.process == "gamma" else 0.0, share)
                lag_s = measured["send_lag_ns"].to_numpy()[rows] / 1e9 if "send_lag_ns" in measured else np.zeros(2)
                in_order = np.argsort(measured[intended_col].to_numpy()[rows], kind="stable") if len(rows) > 1 \
                    else slice(None)
                steps = np.diff(lag_s[in_order]) if len(lag_s) > 1 else np.zeros(1)
                row |= _renewal_row(np.diff(sent).astype(float) / 1e9, asked, float(steps.var()), rng)
                row["schedule_cv"] = float(np.diff(intended).std() / np.diff(intended).mean()) if len(rows) > 2 else None
            elif a.process == "onoff":
                on_s, off_s = _declared(a.on_s, "on_s"), _declared(a.off_s, "off_s")
                window = on_s + off_s
                idc, windows = counts_idc(sent / 1e9, window)
                model = onoff_idc(_declared(a.on_rate, "on_rate"), _declared(a.off_rate, "off_rate"), on_s, off_s, window,
                                  share)
                ok = None if idc is None else model / IDC_FACTOR <= idc <= model * IDC_FACTOR
                row |= {"statistic": f"index of dispersion ({window:g} s windows)", "measured": idc, "expected": model,
                        "windows": windows, "ok": ok,
                        "interpretation": "too few windows to test" if idc is None else (
                            f"counts over {windows} windows of {window:g} s vary {idc:.3g}× their mean, the on/off "
                            f"model {model:.3g}× (Poisson: 1)" + ("" if ok else ": not the asked burst structure"))}
            else:
                lag = measured["send_lag_ns"].to_numpy()[rows] if "send_lag_ns" in measured else np.empty(0)
                row |= _trace_row(sent, intended, lag)
            out.append(row)
    names = phase_names(profile)
    return [ArrivalProcessRow(**row, phase_name=names.get(int(row["phase"]), str(row["phase"]))) for row in out]


def failed_checks(rows: list[ArrivalProcessRow]) -> list[str]:
    """One warning per merged row whose delivered process is not the asked one."""
    return [f"arrivals, phase {r.phase}: the sends were not the {r.process} process asked for "
            f"({r.interpretation})" for r in rows if r.source == "merged" and r.ok is False]
