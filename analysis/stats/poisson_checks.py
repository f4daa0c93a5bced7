"""Was the load really Poisson? Per worker and merged (reference time), per constant-rate phase: KS and
Anderson–Darling tests of the send gaps against the exponential, the achieved vs intended rate, and the index
of dispersion of counts per second — with what a failure means for the numbers in the report."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats

from tailrace.analysis.read.frames import group_positions, key_runs, take, take_runs
from tailrace.analysis.stats.estimators import dispersion_pvalue, index_of_dispersion, ks_exponential
from tailrace.analysis.stats.scenarios import phase_names
from tailrace.analysis.stats.sorting import TIME_SORT
from tailrace.contract.profile import Profile
from tailrace.contract.summary.tables import ArrivalsRow

P_MIN = 0.001  # KS and dispersion: a row runs several tests and a report many rows; a chance failure is rare
AD_P_MIN = 0.01  # scipy's interpolated Anderson–Darling p-values stop at 0.01
GOF_MAX_GAPS = 100_000


def anderson_exponential(gaps_s: np.ndarray) -> tuple[float, float] | None:
    """Anderson–Darling statistic and (table-interpolated, 0.01–0.15) p-value of gaps against the exponential
    with their own mean: more weight in the tails than KS, where bunched or spread-out sends show."""
    g = np.asarray(gaps_s, dtype=float)
    if len(g) < 20:
        return None
    result = stats.anderson(g, dist="expon", method="interpolate")
    return float(result.statistic), float(result.pvalue)


def gaps_tested(t: np.ndarray, most: int = GOF_MAX_GAPS) -> np.ndarray:
    """At most `most` of the gaps between the sorted times `t`, evenly spread over the phase (every k-th gap).
    The gaps of a Poisson process are independent exponentials, so every k-th of them is too; past ~10⁵ gaps a
    goodness-of-fit test rejects for deviations far below anything that matters (the timer's 1 ms
    granularity), and costs memory and seconds. Only the gaps tested are computed."""
    step = -(-(len(t) - 1) // most) if len(t) > 1 else 1
    return t[1::step] - t[:-1:step] if step > 1 else np.diff(t)


def _sorted_seconds(times_ns: np.ndarray) -> np.ndarray:
    """Epoch-ns times sorted, in seconds; `times_ns` (a copy the caller hands over) is sorted in place, unless it is
    in order already (a worker's intended times are: one pass instead of a sort). Integers sort to the same array
    by any algorithm: TIME_SORT, which merges the runs times come in (analysis/stats/sorting.py)."""
    if len(times_ns) > 1 and not bool((times_ns[1:] >= times_ns[:-1]).all()):
        times_ns.sort(kind=TIME_SORT)
    return times_ns / 1e9


def poisson_checks(times_ns: np.ndarray) -> dict:
    """KS and Anderson–Darling on the gaps (gaps_tested), Fisher's dispersion test on counts per second (all of
    them), and whether all three accept a Poisson process at P_MIN."""
    return _checks(_sorted_seconds(np.array(times_ns)))


def _checks(t: np.ndarray) -> dict:
    """poisson_checks of sorted times in seconds."""
    gaps = gaps_tested(t)
    ks, ad = ks_exponential(gaps), anderson_exponential(gaps)
    del gaps
    dispersion_p = dispersion_pvalue(t, is_sorted=True)
    tested = ks is not None
    return {"count": int(len(t)), "rate": float(len(t) / (t[-1] - t[0])) if len(t) > 1 else None,
            "ks_statistic": ks[0] if ks else None, "ks_pvalue": ks[1] if ks else None,
            "ad_statistic": ad[0] if ad else None, "ad_pvalue": ad[1] if ad else None,
            "index_of_dispersion": index_of_dispersion(t, is_sorted=True), "dispersion_pvalue": dispersion_p,
            "poisson_ok": not _failed_tests(ks[1] if ks else None, ad[1] if ad else None, dispersion_p) and tested}


def _failed_tests(ks_p: float | None, ad_p: float | None, dispersion_p: float | None) -> list[str]:
    """The names of the checks that reject a Poisson process."""
    return [name for name, p, floor in (("KS", ks_p, P_MIN), ("Anderson–Darling", ad_p, AD_P_MIN),
                                        ("dispersion", dispersion_p, P_MIN)) if p is not None and p <= floor]


def interpret(row: dict) -> str:
    """What one row's checks say, in words, and whether it matters for the latency numbers: the schedule
    (intended send times) is the load tailrace offered; the actual sends are what the endpoint received."""
    if row["ks_pvalue"] is None:
        return "too few sends to test"
    rate = f" at {row['rate'] / row['intended_rate']:.0%} of the intended rate" if row.get("intended_rate") else ""
    if not row["schedule_poisson_ok"]:
        return (f"the schedule itself is not Poisson{rate} ({', '.join(row['schedule_failed'])}): the rate changed "
                "inside this phase or the profile's phases do not match the run — the latencies are those of this "
                "non-Poisson load")
    if row["poisson_ok"]:
        return f"Poisson{rate}: the schedule and the actual sends pass every check"
    failed = _failed_tests(row["ks_pvalue"], row["ad_pvalue"], row["dispersion_pvalue"])
    return (f"the schedule is Poisson{rate}, the actual sends are not ({', '.join(failed)}): sends "
            f"fell behind by up to {row['send_lag_max_ms']:.0f} ms (p99 {row['send_lag_p99_ms']:.1f} ms) and caught "
            "up in bursts. The latencies count from the intended times, so they are the scheduled load's; the "
            "endpoint's queue saw burstier arrivals than Poisson (its c_a² in the queueing table)")


def _row(name: str, schedule: dict, actual: dict, lag_ms: tuple[float, float], intended_rate: float | None) -> dict:
    """One row, from the checks of the intended and the actual send times (_checks) and the send lag's p99 and
    maximum (ms)."""
    row = {"source": name, **actual, "intended_rate": intended_rate,
           "schedule_ks_pvalue": schedule["ks_pvalue"], "schedule_poisson_ok": schedule["poisson_ok"],
           "schedule_failed": _failed_tests(schedule["ks_pvalue"], schedule["ad_pvalue"], schedule["dispersion_pvalue"]),
           "send_lag_p99_ms": lag_ms[0], "send_lag_max_ms": lag_ms[1]}
    row["interpretation"] = interpret(row)
    return row


def _lag_ms(lag: np.ndarray) -> tuple[float, float]:
    """The send lag's p99 and maximum (ms), 0 where there is none."""
    return (float(np.percentile(lag, 99)) / 1e6, float(lag.max()) / 1e6) if len(lag) else (0.0, 0.0)


def _intended_rates(profile: Profile | None) -> tuple[dict[int, float], dict[str, float]]:
    """(phase → the whole load's intended rate, region → the fraction one of its workers sends)."""
    if profile is None or profile.load.scenario != "server":
        return {}, {}
    from tailrace.analysis.stats.scenarios import phase_segments  # scenarios imports latency; keep this module's imports light

    warm = profile.load.warmup_s > 0
    rates = {i + (0 if warm else 1): s.expected / s.width_s for i, s in enumerate(phase_segments(profile))
             if s.width_s > 0}
    return rates, {r.name: r.share / r.workers for r in profile.regions}


def _pick(values: np.ndarray, rows) -> np.ndarray:
    """values at `rows`: [start, stop) runs (frames.key_runs) or ascending positions."""
    return take_runs(values, rows) if isinstance(rows, list) else take(values, rows)


def _rows_by_phase_and_worker(df: pd.DataFrame) -> tuple[dict, dict]:
    """((phase, worker) → its rows, phase → its rows), as runs when the log comes in long stretches per worker
    and phase (then no array of positions is made), else as positions."""
    by_worker = key_runs(df, ["phase", "worker"])
    if by_worker is None:
        return group_positions(df, ["phase", "worker"]), group_positions(df, ["phase"])
    by_phase: dict = {}
    for (phase, _), runs in by_worker.items():
        by_phase.setdefault(phase, []).extend(runs)
    return by_worker, {phase: sorted(runs) for phase, runs in by_phase.items()}


@dataclass(frozen=True)
class _Task:
    phase: int
    source: str  # a worker, or "merged" (every worker, on the reference clock)
    rows: object  # [start, stop) runs or ascending positions
    intended_rate: float | None


def arrival_checks_by_column(keys: pd.DataFrame, column: Callable[[str], np.ndarray], profile: Profile | None = None,
                             spare: Callable[..., None] = lambda *names: None) -> list[ArrivalsRow]:
    """Per worker and merged (reference time), per constant-rate phase: actual send gaps vs the exponential.
    `keys`: each request's phase, worker and region; `column(name)`: a time or lag column's values, asked for one
    at a time — the intended times, then the sent ones, each on the worker's clock for the workers' rows and then on
    the reference clock for the merged ones, then the lag — and `spare`d after (a day's log holds five 800 MB time
    columns: never all at once). The workers' rows are checked in parallel; each merged phase (most of the run's
    rows) alone, so that only one of them is in memory at a time."""
    by_worker, by_phase = _rows_by_phase_and_worker(keys)
    region = keys["region"].array  # indexed once per worker: never converted whole
    phase_rate, worker_fraction = _intended_rates(profile)
    tasks: list[_Task] = []
    for phase in sorted(by_phase):
        if phase == 0:
            continue
        rate = phase_rate.get(int(phase))
        for worker in sorted((w for p, w in by_worker if p == phase), key=str):
            rows = by_worker[(phase, worker)]
            fraction = worker_fraction.get(str(region[rows[0][0] if isinstance(rows, list) else rows[0]]))
            tasks.append(_Task(int(phase), worker, rows, rate * fraction if rate and fraction else None))
        tasks.append(_Task(int(phase), "merged", by_phase[phase], rate))
    merged = [i for i, t in enumerate(tasks) if t.source == "merged"]
    workers = [i for i in range(len(tasks)) if i not in merged]

    def checked(values: np.ndarray, i: int) -> dict:
        return _checks(_sorted_seconds(_pick(values, tasks[i].rows)))  # each taken copy sorted in place, freed

    checks: dict[str, dict[int, dict]] = {}
    done: list[str] = []
    for kind, local, reference in (("schedule", "t_intended", "t_intended_ref"), ("actual", "t_sent", "t_sent_ref")):
        local_values = column(local)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # the sorts release the GIL
            checks[kind] = dict(zip(workers, pool.map(partial(checked, local_values), workers)))
        reference_values = column(reference)  # (computed from the local times where it is a derived column)
        del local_values
        spare(*done, local)
        checks[kind].update({i: checked(reference_values, i) for i in merged})
        del reference_values
        done += [local, reference]
        spare(*done)
    lag = column("send_lag_ns")
    rows = [{"phase": t.phase, **_row(t.source, checks["schedule"][i], checks["actual"][i], _lag_ms(_pick(lag, t.rows)),
                                       t.intended_rate)} for i, t in enumerate(tasks)]
    del lag
    spare(*done, "send_lag_ns")
    names = phase_names(profile) if profile is not None else {}
    return [ArrivalsRow(**row, phase_name=names.get(row["phase"], str(row["phase"]))) for row in rows]
