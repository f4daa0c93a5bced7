"""The analysis of one run directory: every number the report, summary.json and tables show."""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from analysis.decide.variants import variant_decision
from analysis.read.chunks import LateChunkError
from analysis.read.clock_correction import fit_all, to_reference, worker_runs
from analysis.read.frames import endpoint_region_positions, largest_positions
from analysis.read.rundir import load_run, run_validity
from analysis.read.triton_stats import endpoint_stat_deltas, requests_per_execution, stats_timeline
from analysis.report.figures import Figures, InlineFigures
from analysis.result import Analysis
from analysis.stats.arrivals import arrival_checks
from analysis.stats.cold_start import cold_start_table
from analysis.stats.correlation import TimeOrder
from analysis.stats.decomposition import decomposition_table
from analysis.stats.latency import add_goodput, flat_rows, latency_table, region_cdfs, request_count_table
from analysis.stats.outages import outage_windows
from analysis.stats.queueing import queueing_table
from analysis.stats.scenarios import per_phase_table, phase_boundaries_s, phase_names, scenario_summary
from analysis.stats.slo import evaluate_slos, overall_verdict, with_implicit_slos
from analysis.stats.timeline import Timeline, timeline
from analysis.stats.validity import groups_of, validity_rows
from contract.profile import Profile

SUMMARY_VERSION = 1
# the columns the latency table reads first (its counts, send lag and accuracy), then those it, the SLO
# verdicts and the validity checks read (each at the measured rows' positions)
COUNT_COLUMNS = ("endpoint", "region", "status", "send_lag_ns", "correct", "correct_count", "batch_size")
MEASURED_COLUMNS = ("endpoint", "region", "status", "latency_ns", "t_intended_ref", "phase")
# the columns each of the other statistics reads (in the order analyze_run computes them)
FIRST_COLUMNS = ("worker", "phase", "status", "endpoint", "region")  # read first: a chunk failing here is skipped
ARRIVAL_COLUMNS = ("t_sent", "t_sent_ref", "t_intended", "t_intended_ref", "send_lag_ns", "phase", "worker", "region")
SCENARIO_COLUMNS = ("phase", "endpoint", "region", "status", "latency_ns", "t_intended_ref", "t_sent_ref",
                    "t_done_ref", "batch_size", "correct", "correct_count")
SLOWEST_COLUMNS = ("region", "endpoint", "status", "latency_ns", "send_lag_ns", "t_intended_ref")
QUEUEING_COLUMNS = ("status", "server_receive_ns", "endpoint", "model")  # and each of SERVER_COLUMNS in turn
VARIANT_COLUMNS = ("endpoint", "phase", "status", "latency_ns", "t_intended_ref", "correct", "correct_count",
                   "batch_size", "sample_index", "server_compute_ns")
PHASE_COLUMNS = ("phase", "status", "latency_ns", "t_intended_ref")
COLD_START_COLUMNS = ("endpoint", "model", "phase", "status", "latency_ns", "t_intended_ref")
ERROR_COLUMNS = ("status", "code", "error", "t_intended_ref", "endpoint", "region")  # and outage_windows'
REPORT_COLUMNS = ("region", "t_intended_ref", "status", "latency_ns")  # the report's timeline (analysis/report/plots.py)
SLOWEST = 20


def clock_warnings(requests: pd.DataFrame, clock: pd.DataFrame) -> list[str]:
    """A warning for each worker that sent requests but left no clock samples: its timestamps are merged with
    the offset stamped on each row (0 when it never measured one), not a fitted clock model."""
    sampled = set(clock["worker"].unique()) if len(clock) else set()
    return [f"{w}: no clock samples (clock-*.parquet missing); its timestamps are not clock-corrected, so its "
            f"network legs and cross-region timeline may be off by its clock error"
            for w in sorted(set(requests["worker"].unique()) - sampled)]


def _rows_read(runs: list[tuple[str, slice]]) -> dict[str, int]:
    """worker → the request rows read from its chunks (`runs`: clock_correction.worker_runs of the log)."""
    read: dict[str, int] = {}
    for worker, rows in runs:
        read[str(worker)] = read.get(str(worker), 0) + rows.stop - rows.start
    return read


def _with_client_counts(rows: list[dict], df: pd.DataFrame) -> list[dict]:
    """Add the client's own count of successful requests (all phases) to each server-side statistics row."""
    for row in rows:
        row["client_ok"] = int(((df["status"] == "ok") & df["endpoint"].isin(row["endpoints"])).sum())
    return rows


def _scenario_table(scenario: dict) -> pd.DataFrame:
    rows = scenario.get("p90") or scenario.get("p99") or scenario.get("per_region") or []
    return pd.DataFrame(rows)


def _outages_drawn(errors: pd.DataFrame, trace_ids: Callable[[pd.Index], list[str]], figures: Figures,
                   line: Callable[[], Timeline | None], profile: Profile) -> list[dict]:
    """The outage windows; with the report's timeline (`line()`), both handed to `figures` (the timeline's
    figure shades the outages; the only figure submitted meanwhile)."""
    outages = outage_windows(errors, trace_ids=trace_ids)
    if (drawn := line()) is not None:
        figures.submit("over_time_of", drawn, phase_boundaries_s(profile), outages)
    return outages


def analyze_run(run_dir: Path, columns: tuple[str, ...] | None = None, exclude: dict[str, str] | None = None,
                figures: Figures | None = None) -> Analysis:
    """Load and analyse a run directory. `columns`: the request columns to read — `tailrace analyze` reads
    ANALYSIS_COLUMNS only (analysis/read/rundir.py), a few at a time, each freed after the last statistic that reads
    it; the Python API reads every column and keeps them, so that `Analysis.requests` holds the whole log.
    A chunk that turns out unreadable after its first columns were used is skipped, and the analysis starts
    again without it (`exclude`: chunk → reason). `figures` (analysis/report/figures.py) is handed each of the report's
    figures' numbers once they exist, to draw them while the analysis goes on."""
    try:
        return _analyze_run(run_dir, columns, exclude or {}, figures or InlineFigures())
    except LateChunkError as exc:
        if exc.path in (exclude or {}):
            raise
        return analyze_run(run_dir, columns, {**(exclude or {}), exc.path: exc.reason}, figures)


def _analyze_run(run_dir: Path, columns: tuple[str, ...] | None, exclude: dict[str, str], figures: Figures
                 ) -> Analysis:
    keep = columns is None
    data = load_run(run_dir, columns, first=None if keep else FIRST_COLUMNS, exclude=exclude)
    manifest, profile, log = data.manifest, data.plan.profile, data.log

    def done(*names: str) -> None:  # the statistics below read these no more
        if not keep:
            log.release(*names)

    if keep:
        log.keep_bytes = math.inf  # Analysis.requests holds every column: none is spared

    endpoint_models = {e.name: e.model for e in profile.endpoints}
    models = fit_all(data.clock)
    unsampled = clock_warnings(log.frame(["worker"]), data.clock)
    runs = worker_runs(log.values("worker"))
    for column in ("t_intended", "t_sent", "t_done"):  # on the reference clock: computed when first read
        log.derive(column + "_ref", lambda log, local=column: to_reference(
            log.values(local), log.values("clock_offset_ns"), runs, models))
    log.load(("t_intended", "t_sent", "clock_offset_ns", "send_lag_ns"))  # one pass over the chunks
    in_measured = (log.frame(["phase"])["phase"] > 0).to_numpy()
    # the columns the statistics below read first, in that order: read in the background while those before
    # them compute (where they fit in the memory kept for columns)
    log.prefetch([("latency_ns", "t_done", "server_receive_ns", "server_queue_ns", "server_compute_ns",
                   "server_send_ns"), ("model", "sample_index") if profile.decision else ("model",),
                  ("correct", "correct_count", "batch_size"), ("code", "error")])
    arrivals = arrival_checks(log.frame(ARRIVAL_COLUMNS), profile)
    done("t_intended", "worker")  # t_intended_ref is read to the end
    log.spare("t_sent", "t_sent_ref", "send_lag_ns")
    # the open loop's own numbers are the latency table's: its scenario summary reads no column
    scenario = scenario_summary(log.frame(SCENARIO_COLUMNS if profile.load.scenario != "server" else ()), profile,
                                {n: (w or {}).get("summary") or {} for n, w in (manifest.get("workers") or {}).items()})
    log.spare("t_done_ref", "t_done", "batch_size", "correct", "correct_count")
    slowest = log.frame(SLOWEST_COLUMNS).loc[largest_positions(log.values("latency_ns"), np.flatnonzero(in_measured),
                                                               SLOWEST)]
    # read again by the per-phase and latency tables: a long run's are freed while the legs and queueing take
    # their columns
    log.spare("latency_ns", "t_intended_ref", "phase")
    # the slowest requests' legs, labelled by their rows, as the table's legs are read
    decomposition, slow_legs = decomposition_table(log, slowest.index.to_numpy())
    done("t_sent_ref", "t_done_ref", "t_sent", "t_done", "clock_offset_ns")
    figures.submit("decomposition_bars", decomposition)
    figures.submit("clock_offsets", data.clock)
    # the statistics below read the log at these rows (no copy), as 32-bit positions where they fit
    measured_rows = np.flatnonzero(in_measured).astype(np.int32 if log.rows < 2**31 else np.int64)
    # where the whole log fits in the memory kept for columns, statistics compute in a thread beside those after
    # them (numpy's sorts and reductions run without the GIL; docs/ARCHITECTURE.md has the numbers): the per-phase
    # table (after the endpoint × region rows the latency table waits for) and the report's timeline beside the
    # server-side statistics and the latency table, the outages beside the verdicts; a long run's compute in
    # order, one at a time, so that its peak stays what it was
    side = ThreadPoolExecutor(1, thread_name_prefix="tailrace-side") if log.fits() else None
    if side is not None:  # beside the server-side statistics: first what the latency table waits for, the groups
        # and the rows' time order (found once, for every statistic that puts its rows in time order)
        groups_ready = side.submit(endpoint_region_positions, log.frame(["endpoint", "region"]), measured_rows).result
        order_ready = side.submit(TimeOrder, log.values("t_intended_ref")).result
        phases_ready = side.submit(lambda phases: per_phase_table(phases, profile, order_ready()),
                                   log.frame(PHASE_COLUMNS)).result
        line = side.submit(timeline, log.frame(REPORT_COLUMNS)).result if figures.ahead else lambda: None
    synthetic = {m for m in log.values("model").unique() if str(m).startswith("synthetic")}
    stat_rows = _with_client_counts(endpoint_stat_deltas(data.endpoint_stats, endpoint_models),
                                    log.frame(["status", "endpoint"]))
    # the server columns are read a pair at a time: a long run's are spared between
    queueing = queueing_table(log.frame(QUEUEING_COLUMNS), profile.embedded.slots, synthetic,
                              requests_per_execution(stat_rows), measured_rows, log.values, log.spare)
    figures.submit("queue_vs_utilization", queueing)
    decision = variant_decision(log.frame(VARIANT_COLUMNS), data, stat_rows) if profile.decision else None
    cold_start = cold_start_table(log.frame(COLD_START_COLUMNS), data.cold_starts, profile.cold_start.first_k)
    done("server_queue_ns", "server_compute_ns", "server_receive_ns", "server_send_ns", "sample_index", "model")
    if side is not None:
        positions = groups_ready()
    else:
        per_phase = per_phase_table(log.frame(PHASE_COLUMNS), profile)
        positions = endpoint_region_positions(log.frame(["endpoint", "region"]), measured_rows)
    duration = profile.load.duration_s
    counts = request_count_table(log.frame(COUNT_COLUMNS), duration, positions, measured_rows)
    done("send_lag_ns", "correct", "correct_count", "batch_size")  # freed before the latencies are sorted
    measured = log.frame(MEASURED_COLUMNS)
    order = order_ready() if side is not None else None
    latency_rows, ok_sorted = latency_table(measured, profile, duration, positions, measured_rows, counts, order)
    cdfs = region_cdfs(ok_sorted)
    # the report's other figures, drawn while the statistics below compute; the timeline with the outages it shades
    # (a long run's timeline is computed once they free their rows, so that it adds nothing to the peak)
    figures.submit("heatmap_p99", latency_rows)
    figures.submit("latency_cdfs", cdfs)
    if side is not None:  # beside the verdicts
        outages_drawn = side.submit(_outages_drawn, log.frame(ERROR_COLUMNS), data.trace_ids, figures, line,
                                    profile).result
    slos = [slo.model_dump() for slo in profile.slos]
    add_goodput(latency_rows, measured, slos, duration, positions)
    groups = groups_of(measured, positions, order)
    del order
    threads = (os.cpu_count() or 1) if side is not None else 1  # a long run's groups one at a time: its peak
    endpoint_names, region_names = [e.name for e in profile.endpoints], [r.name for r in profile.regions]
    verdicts = evaluate_slos(measured, with_implicit_slos(slos, endpoint_names, region_names), endpoint_names,
                             region_names, groups, {(str(e), str(r)): v for (e, r), v in ok_sorted.items()}, threads)
    validity = validity_rows(groups, ok_sorted, threads)
    del ok_sorted
    del groups, measured, positions, measured_rows  # a large run's time-ordered groups: not needed past here
    if side is not None:
        per_phase, outages = phases_ready(), outages_drawn()
        side.shutdown()
    else:
        outages = _outages_drawn(log.frame(ERROR_COLUMNS), data.trace_ids, figures,
                                 lambda: (timeline(log.frame(REPORT_COLUMNS)) if figures.ahead else None), profile)
    names = phase_names(profile)
    arrivals = [a | {"phase_name": names.get(a["phase"], str(a["phase"]))} for a in arrivals]
    for row in validity:
        row["phase_name"] = names.get(row["phase"], str(row["phase"])) if row["phase"] is not None else None
        row["phases"] = ", ".join(names.get(p, str(p)) for p in row.pop("phases_tested")) or None
    valid, invalid_reasons = run_validity(data, _rows_read(runs))
    verdict, exit_code = overall_verdict(verdicts, valid)
    df = log.frame(ERROR_COLUMNS)
    failed = df.loc[(df["status"] != "ok").to_numpy(), ["status", "code", "error"]]
    by_class = failed.groupby(["status", "code"], observed=True)
    errors = by_class.agg(count=("status", "size"), example_error=("error", "first")).reset_index()
    first_rows = {key: failed.index[rows[:3]] for key, rows in by_class.indices.items()}
    errors.insert(3, "example_trace_ids", [data.trace_ids(first_rows[key]) for key in zip(errors["status"],
                                                                                         errors["code"])])
    for column in ("status", "code", "example_error"):  # plain strings in the tables, as before categoricals
        errors[column] = errors[column].astype(object)
    slowest_rows = []
    for r, trace_id in zip(slowest.itertuples(), data.trace_ids(slowest.index)):
        row = {"trace_id": trace_id, "region": r.region, "endpoint": r.endpoint, "status": r.status,
               "latency_ms": r.latency_ns / 1e6, "send_lag_ms": r.send_lag_ns / 1e6,
               "t_intended_ref_ns": int(r.t_intended_ref)}
        if r.Index in slow_legs.index:
            leg = slow_legs.loc[r.Index]
            row.update({k + "_ms": float(leg[k]) for k in ("network_up", "server_queue", "server_compute",
                                                          "server_other", "network_down")})
        slowest_rows.append(row)
    summary = {
        "summary_version": SUMMARY_VERSION,
        "run_id": manifest.get("run_id") or data.plan.run_id, "profile": profile.name, "verdict": verdict,
        "exit_code": exit_code, "valid": valid, "invalid_reasons": invalid_reasons,
        "warnings": manifest.get("warnings", []) + unsampled,
        "input": {"rows_read": int(log.rows), "chunks_read": data.chunks_read,
                  "chunks_skipped": [{"path": s.path, "reason": s.reason} for s in data.skipped]},
        "duration_s": duration, "scenario": scenario, "slos": verdicts, "latency": latency_rows, "phases": per_phase,
        "decomposition": decomposition,
        "queueing": queueing, "arrivals": arrivals, "validity": validity,
        "clock": [m.as_dict() for m in models.values()],
        "errors": errors.to_dict(orient="records"), "slowest": slowest_rows,
        "endpoint_statistics": stat_rows,
        "server_timeline": {name: stats_timeline(points, endpoint_models.get(name, ""))
                            for name, points in data.stats_timelines.items()},
        "outages": outages,
        "decision": decision, "cold_start": cold_start,
        "manifest": {k: manifest.get(k) for k in ("versions", "host", "seed", "git_sha", "start_ns", "end_ns",
                                                  "valid", "invalid_reasons", "warnings", "host_cpu", "workers")},
    }
    tables = {"latency": flat_rows(latency_rows), "scenario": _scenario_table(scenario), "slos": pd.DataFrame(verdicts),
              "decomposition": pd.DataFrame(summary["decomposition"]), "queueing": pd.DataFrame(
                  [{k: v for k, v in q.items() if k != "mm1"} | {f"mm1_{k}": v for k, v in (q.get("mm1") or {}).items()}
                   for q in queueing]),
              "arrivals": pd.DataFrame(summary["arrivals"]), "validity": pd.DataFrame(validity), "phases": pd.DataFrame(per_phase),
              "errors": errors, "outages": pd.DataFrame(summary["outages"]),
              "cold_start": pd.DataFrame(summary["cold_start"]),
              "decision": pd.DataFrame((summary["decision"] or {}).get("variants", [])),
              "server_statistics": pd.DataFrame(summary["endpoint_statistics"]),
              "slowest": pd.DataFrame(slowest_rows), "clock": pd.DataFrame(summary["clock"])}
    del df
    done("code", "error", "phase", "endpoint")
    return Analysis(data, log.frame(log.names if keep else REPORT_COLUMNS), models, summary, tables, cdfs)
