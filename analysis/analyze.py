"""The analysis of one run directory: every number the report, summary.json and tables show."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from tailrace.analysis.decide.variants import endpoint_serving, monitor_scopes, variant_decision
from tailrace.analysis.otel.server_spans import SERVER_SPAN_COLUMNS, JoinedSpans, joined_server_spans, read_span_file
from tailrace.analysis.read.chunks import LateChunkError
from tailrace.analysis.read.clock_correction import fit_all, to_reference, worker_runs
from tailrace.analysis.read.frames import (
    endpoint_region_positions,
    largest_positions,
    present,
    strings,
    take,
    take_rows,
)
from tailrace.analysis.read.hardware import monitor_series
from tailrace.analysis.read.progress import Progress
from tailrace.analysis.read.rundir import RunData, load_run, run_validity
from tailrace.analysis.read.schedule import Columns, Results, Statistic
from tailrace.analysis.read.schedule import run as run_statistics
from tailrace.analysis.read.server_metrics import aborted_deltas, prefix_cache_deltas, prefix_cache_timeline
from tailrace.analysis.read.triton_stats import endpoint_stat_deltas, requests_per_execution, stats_timeline
from tailrace.analysis.report.csv_tables import summary_tables
from tailrace.analysis.report.figures import Figures, InlineFigures
from tailrace.analysis.result import Analysis
from tailrace.analysis.stats.arrival_process import failed_checks, process_checks
from tailrace.analysis.stats.chains.pipelines import PIPELINE_COLUMNS, PipelineResults, pipeline_section
from tailrace.analysis.stats.chains.sessions import (
    SESSION_COLUMNS,
    cache_table,
    hit_ratio_over_time,
    session_table,
    sessions_in_flight,
    turn_table,
)
from tailrace.analysis.stats.cold_start import cold_start_table
from tailrace.analysis.stats.correlation import TimeOrder
from tailrace.analysis.stats.decomposition import (
    DECOMPOSITION_COLUMNS,
    TTFT_DECOMPOSITION_COLUMNS,
    decomposition_table,
    ttft_decomposition,
)
from tailrace.analysis.stats.hardware.usage import HARDWARE_COLUMNS, hardware_section
from tailrace.analysis.stats.hardware.windows import phase_windows
from tailrace.analysis.stats.latency import (
    ONE_SHOT,
    STREAM,
    add_goodput,
    latency_table,
    region_cdfs,
    request_count_table,
    with_stream_goodput,
)
from tailrace.analysis.stats.outcomes.accuracy import (
    GRADE_COLUMNS,
    AccuracyResults,
    accuracy_rows,
    accuracy_trends,
    accuracy_verdicts,
    by_answerer,
)
from tailrace.analysis.stats.outcomes.cancellation import CANCEL_COLUMNS, cancellation_table
from tailrace.analysis.stats.poisson_checks import arrival_checks_by_column
from tailrace.analysis.stats.pooling import POOLING_COLUMNS, pooling_table
from tailrace.analysis.stats.queueing import SERVER_COLUMNS, queueing_table
from tailrace.analysis.stats.scenarios import (
    per_phase_table,
    phase_boundaries_s,
    phase_names,
    phase_rates,
    scenario_summary,
)
from tailrace.analysis.stats.slo import evaluate_slos, overall_verdict, with_implicit_slos
from tailrace.analysis.stats.timeline import Timeline, TokenFigures, outage_windows, timeline
from tailrace.analysis.stats.tokens import (
    TIMELINE_COLUMNS,
    TOKEN_COLUMNS,
    ByModel,
    by_model_section,
    good_streams,
    token_curves,
    token_table,
    token_timeline,
    token_verdicts,
)
from tailrace.analysis.stats.validity import groups_of, validity_rows
from tailrace.contract.layout import RunLayout
from tailrace.contract.profile import Profile
from tailrace.contract.records import CANCELLED
from tailrace.contract.summary import SUMMARY_VERSION, RunSummary
from tailrace.contract.summary.sections import InputRead, ManifestExcerpt, Sessions, SkippedChunk
from tailrace.contract.summary.tables import (
    ArrivalsRow,
    EndpointStatistics,
    ErrorRow,
    Outage,
    SlowRequest,
)

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
PHASE_COLUMNS = ("phase", "status", "latency_ns", "t_intended_ref", "endpoint")
COLD_START_COLUMNS = ("endpoint", "model", "phase", "status", "latency_ns", "t_intended_ref")
ERROR_COLUMNS = ("status", "code", "error", "t_intended_ref", "endpoint", "region")  # and outage_windows'
# the report's timeline (analysis/report/plots.py; the endpoint: its p99 line holds one kind of endpoint)
REPORT_COLUMNS = ("region", "t_intended_ref", "status", "latency_ns", "endpoint")
SLOWEST = 20
# what summary.json keeps of the run's manifest
MANIFEST_EXCERPT = ("versions", "host", "seed", "git_sha", "start_ns", "end_ns", "valid", "invalid_reasons", "warnings",
                    "host_cpu", "workers", "overrides")


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


def _with_client_counts(rows: list[EndpointStatistics], df: pd.DataFrame) -> list[EndpointStatistics]:
    """Add the client's own count of successful requests (all phases) to each server-side statistics row."""
    for row in rows:
        row.client_ok = int(((df["status"] == "ok") & df["endpoint"].isin(row.endpoints)).sum())
    return rows


def _outages_drawn(errors: pd.DataFrame, trace_ids: Callable[[pd.Index], list[str]], figures: Figures,
                   line: Callable[[], Timeline | None], profile: Profile, order: TimeOrder | None) -> list[Outage]:
    """The outage windows (`order`: the log's time order, where found); with the report's timeline (`line()`),
    both handed to `figures` (the timeline's figure shades the outages; the only figure submitted meanwhile)."""
    outages = outage_windows(errors, trace_ids=trace_ids, time_order=order)
    if (drawn := line()) is not None:
        figures.submit("over_time_of", drawn, phase_boundaries_s(profile), outages)
    return outages


def analyze_run(run_dir: Path, columns: tuple[str, ...] | None = None, exclude: dict[str, str] | None = None,
                figures: Figures | None = None, span_files: tuple[Path, ...] = (),
                retain: tuple[str, ...] = (), progress: Progress | None = None) -> Analysis:
    """Load and analyse a run directory. `columns`: the request columns to read — `tailrace analyze` reads
    ANALYSIS_COLUMNS only (analysis/read/rundir.py), a few at a time, each freed after the last statistic that reads
    it; the Python API reads every column and keeps them, so that `Analysis.requests` holds the whole log.
    A chunk that turns out unreadable after its first columns were used is skipped, and the analysis starts
    again without it (`exclude`: chunk → reason). `figures` (analysis/report/figures.py) is handed each of the
    report's figures' numbers once they exist, to draw them while the analysis goes on. `span_files`: OTLP JSON
    files of the servers' spans, joined to the requests beside what the run's own receiver got (SpanFileError: one
    is not OTLP JSON). `retain`: columns `Analysis.requests` keeps beside the report's (a `*_ref` one on the reference
    clock), for what reads the run after its analysis (the spans `tailrace run` exports). `progress`: the terminal's
    progress line (analysis/read/progress.py)."""
    spans = server_spans_of(run_dir, span_files)
    try:
        return _analyze_run(run_dir, columns, exclude or {}, figures or InlineFigures(), spans, retain, progress)
    except LateChunkError as exc:
        if exc.path in (exclude or {}):
            raise
        return analyze_run(run_dir, columns, {**(exclude or {}), exc.path: exc.reason}, figures, span_files, retain,
                           progress)


def server_spans_of(run_dir: Path, span_files: tuple[Path, ...]) -> tuple[list, list[str]]:
    """(the servers' spans, where they came from): the run's receiver's (a last line cut short left out) and
    `span_files`'."""
    received = RunLayout(run_dir).server_spans
    spans, sources = [], []
    for path, own in ((received, True), *((Path(f), False) for f in span_files)):
        if own and not path.exists():
            continue
        spans += read_span_file(path, tolerate_last=own)
        sources.append(str(path))
    return spans, sources


@dataclass(frozen=True)
class _Run:
    """What every statistic may know besides its columns: the run, its measured rows, where figures go."""

    data: RunData
    profile: Profile
    figures: Figures
    in_measured: np.ndarray  # per row: in a measured phase (their positions: the "measured" statistic)
    threads: int  # for statistics over groups: both cores where the log fits, else one at a time (its peak)
    spans: tuple[list, list[str]] = ([], [])  # the servers' spans and their sources (analysis/otel/server_spans.py)

    @property
    def duration(self) -> float:
        return self.profile.load.duration_s


class _RunStatistics:
    """The statistics of one run, declared (analysis/read/schedule.py runs them): the settings they share, and the
    steps that hand the report's figures over as they compute."""

    def __init__(self, run: _Run) -> None:
        p, data = run.profile, run.data
        self.run, self.p, self.data, self.figures, self.duration = run, p, data, run.figures, run.duration
        self.endpoint_models = {e.name: e.model for e in p.endpoints}
        every_slo = [slo.model_dump() for slo in p.slos]
        self.slos = [s for s in every_slo if s["model"] == "*"]
        self.model_slos = [(i, s) for i, s in enumerate(every_slo) if s["model"] != "*"]  # judged by model
        self.mixed = {e.name for e in p.endpoints if e.models}  # endpoints whose requests draw their model
        self.endpoint_names, self.region_names = [e.name for e in p.endpoints], [r.name for r in p.regions]
        self.scenario_columns = SCENARIO_COLUMNS if p.load.scenario != "server" else ()
        self.worker_summaries = {n: (w or {}).get("summary") or {}
                                 for n, w in (data.manifest.get("workers") or {}).items()}
        self.report_columns = REPORT_COLUMNS if run.figures.ahead else ()
        generative = self.generative = {e.name for e in p.endpoints if e.generative}
        self.cancels = {e.name: e.cancel.after for e in p.endpoints if e.cancel is not None}
        self.embedding_endpoints = frozenset(e.name for e in p.endpoints if e.protocol == "openai-embeddings")
        self.rerank_endpoints = frozenset(e.name for e in p.endpoints if e.protocol == "rerank")
        self.streamed = frozenset(generative)
        self.token_columns = TOKEN_COLUMNS if generative else ()
        self.span_columns = (*SERVER_SPAN_COLUMNS, *(("ttft_ns",) if generative else ())) if run.spans[0] else ()
        self.hardware_columns = (*HARDWARE_COLUMNS, *(("output_tokens",) if generative else ())) if p.monitors else ()
        # and when: a TTFT that trends
        self.verdict_columns = (*TOKEN_COLUMNS, "t_intended_ref") if generative else ()
        self.session_columns = tuple(dict.fromkeys((*TOKEN_COLUMNS, *SESSION_COLUMNS))) if generative else ()
        sessions_on = any(e.sessions is not None for e in p.endpoints)
        self.arrival_columns = (*ARRIVAL_COLUMNS, "turn") if sessions_on else ARRIVAL_COLUMNS
        self.variant_columns = (*VARIANT_COLUMNS, "ttft_ns", "t_first_token", "t_last_token", "output_tokens") \
            if generative else VARIANT_COLUMNS
        self.phase_starts = phase_boundaries_s(p)
        graded = any(e.prompts is not None and e.prompts.graded is not None for e in p.endpoints)
        graded = graded or any(pl.file is not None for pl in p.pipelines)  # a RAG line's reference: its answer graded
        self.accuracy_columns = (*self.verdict_columns, *GRADE_COLUMNS, *(("pipeline",) if p.pipelines else ())) \
            if graded else ()
        if graded:  # the variants' accuracy: their graded answers
            self.variant_columns = (*self.variant_columns, *GRADE_COLUMNS)
        self.accuracy_slos = [(i, s) for i, s in enumerate(slo.model_dump() for slo in p.slos)
                              if s["metric"] == "accuracy"]

    def all(self) -> list[Statistic]:
        """Every statistic, in the order each computes when the log does not fit in memory (a long run)."""
        return [*self.server_side(), *self.by_request(), *self.streams()]

    def decomposition(self, c: Columns, r: Results):
        table = decomposition_table(c, r["slowest"].index.to_numpy(), self.generative)
        self.figures.submit("decomposition_bars", table[0])
        self.figures.submit("clock_offsets", self.data.clock)
        return table

    def queueing(self, c: Columns, r: Results):
        # the synthetic models of exponential service (M/M/1 by construction), not the generative engine's
        # continuous batches (synthetic_lm behind a stream, an embeddings or a rerank endpoint)
        batching = {e.model for e in self.p.endpoints if e.generative or e.pooling}
        synthetic = {m for m in present(c.values("model")) if str(m).startswith("synthetic")} - batching
        # the server columns are read a pair at a time: a long run's are spared between
        rows = queueing_table(c.frame(QUEUEING_COLUMNS), self.p.embedded.slots, synthetic,
                              requests_per_execution(r["server_statistics"]), r["measured"], c.values,
                              c.spare)
        self.figures.submit("queue_vs_utilization", rows)
        return rows

    def cdfs(self, c: Columns, r: Results):
        rows, ok_sorted = r["latency_table"]
        out = region_cdfs(ok_sorted, self.streamed)
        # the report's other figures, drawn while the statistics below compute
        self.figures.submit("heatmap_p99", rows)
        self.figures.submit("latency_cdfs", out)
        return out

    def goodput(self, c: Columns, r: Results):
        add_goodput(r["latency_table"][0], c.frame(MEASURED_COLUMNS), self.slos, self.duration, r["groups"],
                    self.streamed)

    def pooling(self, names: frozenset[str], c: Columns, r: Results) -> list:
        """The embeddings or rerank table of the endpoints `names` ([]: none)."""
        if not names:
            return []
        return pooling_table(c.frame(POOLING_COLUMNS).loc[self.run.in_measured], self.duration, names, self.slos)

    def drawn(self, figure: str, result, *more):
        """`result`, its figure handed to the figure process."""
        if result:
            self.figures.submit(figure, result, *more)
        return result

    def tokens(self, c: Columns, r: Results):
        if not self.token_columns:
            return []
        rows = token_table(c.frame(self.token_columns), self.duration, self.generative, self.slos)
        self.figures.submit("token_heatmap", rows)
        self.figures.submit("ttft_bars", r["ttft_decomposition"])
        return rows

    def accuracy(self, c: Columns, r: Results) -> AccuracyResults:
        """Graded requests: accuracy by endpoint × region × phase, against offered load, and the accuracy SLOs."""
        if not self.accuracy_columns:
            return AccuracyResults()
        df = by_answerer(c.frame(self.accuracy_columns))
        rates = phase_rates(self.p)
        answerers = self.generative | {f"pipeline {pl.name}" for pl in self.p.pipelines}
        rows = accuracy_rows(df, rates, self.duration, self.slos, answerers)
        return AccuracyResults(rows, accuracy_trends(rows),
                               accuracy_verdicts(df, self.accuracy_slos, sorted(self.generative), self.region_names))

    def verdicts(self, c: Columns, r: Results):
        ok_sorted = {(str(e), str(g)): v for (e, g), v in r["latency_table"][1].items()}
        request_slos = [s for s in self.slos if s["metric"] in ("latency", "error_rate")]  # the token ones: "tokens"
        return evaluate_slos(c.frame(MEASURED_COLUMNS), with_implicit_slos(request_slos, self.endpoint_names,
                                                                            self.region_names),
                             self.endpoint_names, self.region_names, r["time_groups"], ok_sorted, self.run.threads,
                             frozenset(self.generative))

    def server_side(self) -> list[Statistic]:
        """The arrivals, the scenario, the slowest requests and where their time went, the server's statistics,
        queueing, the variants' decision, cold starts."""
        run, p, data = self.run, self.p, self.data
        arrival_columns, scenario_columns = self.arrival_columns, self.scenario_columns
        worker_summaries, streamed, endpoint_models = self.worker_summaries, self.streamed, self.endpoint_models
        variant_columns, decomposition, queueing = self.variant_columns, self.decomposition, self.queueing
        # each arrival check declares its columns only where it runs: a long run's five time columns are not read
        # again for a check that returns nothing
        poisson = p.load.arrivals.process == "poisson"
        other_process = p.load.scenario == "server" and not poisson  # arrival_process.py's checks
        return [
            # the measured rows' positions, a result: let go of after their last user (a day's run: 380 MB)
            Statistic("measured", (), lambda c, r: measured_positions(run.in_measured)),
            Statistic("arrivals", arrival_columns if poisson else (), lambda c, r: _arrival_checks(
                c, arrival_columns, p) if poisson else []),
            Statistic("arrival_process", arrival_columns if other_process else (), lambda c, r: process_checks(
                _arrivals(c.frame(arrival_columns)), p) if other_process else []),
            # the open loop's own numbers are the latency table's: its scenario summary reads no column
            Statistic("scenario", scenario_columns,
                      lambda c, r: scenario_summary(c.frame(scenario_columns), p, worker_summaries)),
            Statistic("slowest", SLOWEST_COLUMNS, lambda c, r: _slowest(c.frame(SLOWEST_COLUMNS), r["measured"],
                                                                        streamed), uses=("measured",)),
            # the slowest requests' legs, labelled by their rows, as the table's legs are read
            Statistic("decomposition", DECOMPOSITION_COLUMNS, decomposition, uses=("slowest",)),
            Statistic("server_statistics", ("status", "endpoint"), lambda c, r: _with_client_counts(
                endpoint_stat_deltas(data.endpoint_stats, endpoint_models), c.frame(["status", "endpoint"]))),
            Statistic("queueing", (*QUEUEING_COLUMNS, *SERVER_COLUMNS), queueing, uses=("server_statistics", "measured")),
            Statistic("hardware", self.hardware_columns, lambda c, r: hardware_section(
                monitor_series(data), phase_windows(c.frame(self.hardware_columns)), monitor_scopes(p),
                endpoint_serving(data.plan, r["server_statistics"])) if p.monitors else None,
                      uses=("server_statistics",)),
            Statistic("decision", variant_columns if p.decision else (), lambda c, r: variant_decision(
                c.frame(variant_columns), data, r["server_statistics"], r["hardware"]) if p.decision else None,
                      uses=("server_statistics", "hardware")),
            Statistic("cold_start", COLD_START_COLUMNS, lambda c, r: cold_start_table(
                c.frame(COLD_START_COLUMNS), data.cold_starts, p.cold_start.first_k)),
            Statistic("server_spans", self.span_columns, lambda c, r: joined_server_spans(
                c.frame(self.span_columns), *run.spans) if run.spans[0] else None),
        ]

    def by_request(self) -> list[Statistic]:
        """Per endpoint × region: counts, latency with intervals, goodput, verdicts, validity; phases, the
        timeline, outages, errors."""
        run, p, data, figures, duration = self.run, self.p, self.data, self.figures, self.duration
        streamed, report_columns = self.streamed, self.report_columns
        cdfs, goodput, verdicts = self.cdfs, self.goodput, self.verdicts
        return [
            # beside the server-side statistics where the log fits: first what the latency table waits for (the
            # endpoint × region rows, and the rows' one time order), then the per-phase table and the timeline
            Statistic("groups", ("endpoint", "region"), lambda c, r: endpoint_region_positions(
                c.frame(["endpoint", "region"]), r["measured"]), uses=("measured",), beside="decomposition"),
            # a long run's keeps the order alone (no ranks): half the memory (TimeOrder)
            Statistic("order", ("t_intended_ref",), lambda c, r: TimeOrder(c.values("t_intended_ref"),
                                                                           ranks=c.fits()),
                      beside="decomposition"),
            Statistic("phases", PHASE_COLUMNS, lambda c, r: per_phase_table(c.frame(PHASE_COLUMNS), p, r.get("order"),
                                                                            streamed),
                      uses=("order",), beside="decomposition"),
            # counts, send lag and accuracy first: their columns are freed before the latencies are sorted
            Statistic("counts", COUNT_COLUMNS, lambda c, r: request_count_table(
                c.frame(COUNT_COLUMNS), duration, r["groups"], r["measured"], streamed), uses=("groups", "measured")),
            Statistic("latency_table", MEASURED_COLUMNS, lambda c, r: latency_table(
                c.frame(MEASURED_COLUMNS), p, duration, r["groups"], r["measured"], r["counts"], r.get("order"),
                streamed),
                      uses=("groups", "counts", "order", "measured")),
            Statistic("cdfs", (), cdfs, uses=("latency_table",)),
            Statistic("goodput", MEASURED_COLUMNS, goodput, uses=("latency_table", "groups")),
            Statistic("time_groups", MEASURED_COLUMNS, lambda c, r: groups_of(
                c.frame(MEASURED_COLUMNS), r["groups"], r.get("order"), run.threads), uses=("groups", "order")),
            Statistic("verdicts", MEASURED_COLUMNS, verdicts, uses=("latency_table", "time_groups")),
            Statistic("validity", (), lambda c, r: validity_rows(r["time_groups"], r["latency_table"][1], run.threads,
                                                                phase_names(p)),
                      uses=("latency_table", "time_groups")),
            Statistic("latency", (), lambda c, r: r["latency_table"][0], uses=("latency_table",)),
            # the report's timeline (a long run's once the statistics above freed their rows) and the outages it
            # shades, beside the verdicts where the log fits
            Statistic("timeline", report_columns, lambda c, r: timeline(c.frame(report_columns), streamed) if figures.ahead
                      else None, beside="decomposition"),
            Statistic("outages", ERROR_COLUMNS, lambda c, r: _outages_drawn(
                c.frame(ERROR_COLUMNS), data.trace_ids, figures, lambda: r.get("timeline"), p, r.get("order")),
                      uses=("timeline", "order"), beside="cdfs"),
            Statistic("errors", ERROR_COLUMNS, lambda c, r: _error_table(c.frame(ERROR_COLUMNS), data.trace_ids)),
            *(Statistic(name, POOLING_COLUMNS if names else (), partial(self.pooling, names))
              for name, names in (("embeddings", self.embedding_endpoints), ("rerank", self.rerank_endpoints))),
        ]

    def streams(self) -> list[Statistic]:
        """Streamed (generative) requests: TTFT, TPOT, ITL, E2E and tokens/s, sessions, their verdicts."""
        data, duration = self.data, self.duration
        generative, token_columns, verdict_columns = self.generative, self.token_columns, self.verdict_columns
        session_columns, slos, region_names, drawn = self.session_columns, self.slos, self.region_names, self.drawn
        tokens, phase_starts = self.tokens, self.phase_starts
        return [
            Statistic("ttft_decomposition", TTFT_DECOMPOSITION_COLUMNS if generative else (), lambda c, r: ttft_decomposition(
                c.frame(TTFT_DECOMPOSITION_COLUMNS), generative) if generative else []),
            Statistic("tokens", token_columns, tokens, uses=("ttft_decomposition",)),
            Statistic("token_curves", token_columns, lambda c, r: drawn("token_cdfs", token_curves(
                c.frame(token_columns), generative)) if token_columns else {}),
            Statistic("token_timeline", TIMELINE_COLUMNS if generative else (), lambda c, r: drawn(
                "token_over_time", token_timeline(c.frame(TIMELINE_COLUMNS), generative), phase_starts)
                      if generative else {}),
            Statistic("sessions", session_columns, lambda c, r: _sessions(c.frame(session_columns), data, slos, duration,
                                                                         generative) if session_columns else Sessions()),
            Statistic("token_verdicts", verdict_columns, lambda c, r: token_verdicts(
                c.frame(verdict_columns), slos, generative, region_names) if token_columns else []),
            Statistic("pipelines", PIPELINE_COLUMNS if self.p.pipelines else (), lambda c, r: pipeline_section(
                c.frame(PIPELINE_COLUMNS), {p.name: [s.endpoint for s in p.stages] for p in self.p.pipelines}, slos,
                region_names, duration, data.trace_ids) if self.p.pipelines else PipelineResults()),
            Statistic("by_model", (*verdict_columns, "model") if self.mixed else (), lambda c, r: by_model_section(
                c.frame([*verdict_columns, "model"]), duration, self.mixed, slos, self.model_slos, region_names)
                      if self.mixed else ByModel()),
            Statistic("accuracy", self.accuracy_columns, self.accuracy),
            Statistic("cancellations", CANCEL_COLUMNS if self.cancels else (), lambda c, r: cancellation_table(
                c.frame(CANCEL_COLUMNS), self.cancels, aborted_deltas(
                    data.metrics_scrapes, {e.name: e.model for e in self.p.endpoints}),
                {e.name: (e.url, e.model) for e in self.p.endpoints}) if self.cancels else []),
        ]


def _statistics(run: _Run) -> list[Statistic]:
    """Every statistic of the analysis, in the order each computes when the log does not fit in memory (a long
    run): what it reads, what it uses, what it computes. analysis/read/schedule.py derives the rest."""
    return _RunStatistics(run).all()


# the results the summary is made of (the others are dropped after their last user)
SUMMARY_RESULTS = {"arrivals", "arrival_process", "scenario", "slowest", "decomposition", "server_statistics",
                   "queueing", "decision", "cold_start", "phases", "cdfs", "verdicts", "validity", "latency", "outages",
                   "errors", "embeddings", "rerank", "tokens", "ttft_decomposition", "token_curves", "token_timeline",
                   "token_verdicts", "sessions", "pipelines", "cancellations", "by_model", "hardware", "server_spans",
                   "accuracy"}


def _sessions(df: pd.DataFrame, data: RunData, slos: list[dict], duration: float, generative: set[str]) -> Sessions:
    """Sessions by turn, what they did, sessions in flight, and the prefix cache's hit ratios (empty: a run with neither
    sessions nor anything said of caching)."""
    counters = prefix_cache_deltas(data.metrics_scrapes, {e.name: e.model for e in data.plan.profile.endpoints})
    cache = cache_table(df, generative, counters)
    over_time = hit_ratio_over_time(df, generative)
    if "pipeline" in df:  # a pipeline's stages are recorded as turns: they are no session's
        df = df.loc[strings(df["pipeline"]) == ""].reset_index(drop=True)
    sessions = {str(e) for e in df.loc[df["turn"].to_numpy() > 0, "endpoint"].unique()} & generative
    if not sessions and not cache:
        return Sessions()
    positions, good = good_streams(df, slos, generative)
    for name, lines in over_time.by_endpoint.items():  # the server's own counters, interval by interval
        lines.server = prefix_cache_timeline(data.metrics_timelines.get(name, []), over_time.t0_ns)
    return Sessions(turns=turn_table(df, sessions), sessions=session_table(df, sessions, positions, good, duration),
                    in_flight=sessions_in_flight(df, sessions), prefix_cache=cache, hit_ratio_over_time=over_time)


def measured_positions(in_measured: np.ndarray) -> np.ndarray:
    """The positions of the rows in a measured phase (32-bit where they fit)."""
    return np.flatnonzero(in_measured).astype(np.int32 if len(in_measured) < 2**31 else np.int64)


def _slowest(df: pd.DataFrame, measured: np.ndarray, streamed: frozenset[str]) -> pd.DataFrame:
    """The SLOWEST slowest measured requests (at ascending positions `measured`) of each kind of endpoint (one-shot by
    latency, streams by E2E: a mixed run's slowest one-shot requests are not crowded out by streams that take seconds
    by design), slowest first."""
    latency = df["latency_ns"].to_numpy()
    if not streamed:
        return df.loc[largest_positions(latency, measured, SLOWEST)]
    is_stream = df["endpoint"].isin(streamed).to_numpy()
    parts = [largest_positions(latency, measured[is_stream[measured] == (kind == STREAM)], SLOWEST)
             for kind in (ONE_SHOT, STREAM)]
    return df.loc[np.concatenate(parts)]


def _arrival_checks(c: Columns, columns: tuple[str, ...], p: Profile) -> list[ArrivalsRow]:
    """arrival_checks_by_column of the requests the arrival process sent (_sent_by_the_process), their time columns
    read one at a time (a day's log: five of 800 MB each)."""
    keys = c.frame(["phase", "worker", "region", *(("turn",) if "turn" in columns else ())])
    if "turn" not in keys:
        return arrival_checks_by_column(keys, c.values, p, c.spare)
    first = np.flatnonzero(_sent_by_the_process(keys["turn"].to_numpy()))
    return arrival_checks_by_column(take_rows(keys, first, ["phase", "worker", "region"]),
                                    lambda name: take(c.values(name), first), p, c.spare)


def _sent_by_the_process(turn: np.ndarray) -> np.ndarray:
    """Per request (its session turn, 0 outside sessions): sent by the arrival process — all but a session's later
    turns (the process starts sessions; a later turn is due at the turn before's end + think, not drawn from it)."""
    return turn <= 1


def _arrivals(df: pd.DataFrame) -> pd.DataFrame:
    """The requests the arrival process sent (_sent_by_the_process)."""
    if "turn" not in df:
        return df
    return df.loc[_sent_by_the_process(df["turn"].to_numpy())]


def _error_table(df: pd.DataFrame, trace_ids: Callable[[pd.Index], list[str]]) -> list[ErrorRow]:
    """Failed requests by status class and code: how many, an example error, the first three trace IDs."""
    failed = df.loc[((df["status"] != "ok") & (df["status"] != CANCELLED)).to_numpy(), ["status", "code", "error"]]
    by_class = failed.groupby(["status", "code"], observed=True)
    errors = by_class.agg(count=("status", "size"), example_error=("error", "first")).reset_index()
    first_rows = {key: failed.index[rows[:3]] for key, rows in by_class.indices.items()}
    errors.insert(3, "example_trace_ids", [trace_ids(first_rows[key]) for key in zip(errors["status"],
                                                                                    errors["code"])])
    for column in ("status", "code", "example_error"):  # plain strings in the tables, as before categoricals
        errors[column] = errors[column].astype(object)
    return [ErrorRow(**e) for e in errors.to_dict(orient="records")]


def _slowest_rows(slowest: pd.DataFrame, slow_legs: pd.DataFrame, trace_ids: Callable[[pd.Index], list[str]],
                  streamed: frozenset[str] = frozenset(), spans: JoinedSpans | None = None) -> list[SlowRequest]:
    """The slowest requests, where their time went: the client's legs and, where a server span came back, the
    server's own split (queue, prefill, decode, compute)."""
    timing = spans.timing if spans is not None else {}
    rows = []
    for r, trace_id in zip(slowest.itertuples(), trace_ids(slowest.index)):
        row = {"trace_id": trace_id, "region": r.region, "endpoint": r.endpoint,
               "kind": STREAM if str(r.endpoint) in streamed else ONE_SHOT, "status": r.status,
               "latency_ms": r.latency_ns / 1e6, "send_lag_ms": r.send_lag_ns / 1e6,
               "t_intended_ref_ns": int(r.t_intended_ref)}
        if r.Index in slow_legs.index:
            leg = slow_legs.loc[r.Index]
            row.update({k + "_ms": float(leg[k]) for k in ("network_up", "server_queue", "server_compute",
                                                          "server_other", "network_down")})
        row.update({f"span_{k}": v for k, v in timing.get(int(r.Index), {}).items()})  # the server's span says
        rows.append(SlowRequest(**row))
    return rows


def _with_retained(columns: tuple[str, ...] | None, retain: tuple[str, ...]
                   ) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """(the columns to read, the columns Analysis.requests keeps): the report's and `retain` (a reference time is
    derived from its local one and the row's clock offset)."""
    if retain and columns is not None:
        local = (c.removesuffix("_ref") for c in retain)
        columns = tuple(dict.fromkeys((*columns, *local, "clock_offset_ns")))
    return columns, tuple(dict.fromkeys((*REPORT_COLUMNS, *retain)))


def _on_reference(local: str, runs: list[tuple[str, slice]], models: dict, log) -> np.ndarray:
    """The column `local` (a worker's clock) on the reference clock."""
    return to_reference(log.values(local), log.values("clock_offset_ns"), runs, models)


def _analyze_run(run_dir: Path, columns: tuple[str, ...] | None, exclude: dict[str, str], figures: Figures,
                 spans: tuple[list, list[str]] = ([], []), retain: tuple[str, ...] = (),
                 progress: Progress | None = None) -> Analysis:
    keep = columns is None
    if spans[0] and columns is not None:  # the servers' spans are joined by the requests' own IDs
        columns = (*columns, "trace_id", "span_id")
    columns, kept = _with_retained(columns, retain)
    data = load_run(run_dir, columns, first=None if keep else FIRST_COLUMNS, exclude=exclude,
                    on_read=progress.reading if progress is not None else None)
    manifest, profile, log = data.manifest, data.plan.profile, data.log
    if keep:
        log.keep_bytes = math.inf  # Analysis.requests holds every column: none is spared
    models = fit_all(data.clock)
    unsampled = clock_warnings(log.frame(["worker"]), data.clock)
    runs = worker_runs(log.values("worker"))
    for column in ("t_intended", "t_sent", "t_done"):  # on the reference clock: computed when first read
        log.derive(column + "_ref", partial(_on_reference, column, runs, models), inputs=(column, "clock_offset_ns"))
    log.load(("t_intended", "t_sent", "clock_offset_ns", "send_lag_ns"))  # one pass over the chunks
    in_measured = (log.frame(["phase"])["phase"] > 0).to_numpy()
    run = _Run(data, profile, figures, in_measured, (os.cpu_count() or 1) if log.fits() else 1, spans)
    r = run_statistics(_statistics(run), log, keep, SUMMARY_RESULTS, retain=kept, progress=progress)
    valid, invalid_reasons = run_validity(data, _rows_read(runs))
    pipelines, by_model, accuracy = r["pipelines"], r["by_model"], r["accuracy"]
    verdicts = [*r["verdicts"], *r["token_verdicts"], *pipelines.verdicts, *by_model.verdicts, *accuracy.verdicts]
    verdict, exit_code = overall_verdict(verdicts, valid)
    errors, scenario, queueing, per_phase = r["errors"], r["scenario"], r["queueing"], r["phases"]
    decomposition, slow_legs = r["decomposition"]
    slowest_rows = _slowest_rows(r["slowest"], slow_legs, data.trace_ids,
                                 frozenset(e.name for e in profile.endpoints if e.generative), r["server_spans"])
    latency_rows = with_stream_goodput(r["latency"], r["tokens"])
    stat_rows, duration = r["server_statistics"], profile.load.duration_s
    endpoint_models = {e.name: e.model for e in profile.endpoints}
    present = {n: r[n] for n in ("embeddings", "rerank", "cancellations", "hardware") if r[n]}
    if pipelines.section is not None:
        present["pipelines"] = pipelines.section
    if accuracy.rows:  # graded requests only (a RAG file read: its lines may carry no reference)
        present |= {"accuracy": accuracy.rows, "accuracy_trends": accuracy.trends}
    if r["server_spans"] is not None:  # the workloads' sections: only where the run has them
        present["server_spans"] = r["server_spans"].section
    summary = RunSummary.assemble(
        summary_version=SUMMARY_VERSION, run_id=manifest.get("run_id") or data.plan.run_id, profile=profile.name,
        verdict=verdict, exit_code=exit_code, valid=valid, invalid_reasons=invalid_reasons,
        warnings=manifest.get("warnings", []) + unsampled + failed_checks(r["arrival_process"]),
        input=InputRead(rows_read=int(log.rows), chunks_read=data.chunks_read,
                        chunks_skipped=[SkippedChunk(path=s.path, reason=s.reason) for s in data.skipped]),
        duration_s=duration, scenario=scenario, slos=verdicts, latency=latency_rows, phases=per_phase,
        decomposition=decomposition, queueing=queueing, arrivals=r["arrivals"], arrival_process=r["arrival_process"],
        validity=r["validity"], clock=[m.row() for m in models.values()], errors=errors,
        slowest=slowest_rows, endpoint_statistics=stat_rows,
        server_timeline={name: stats_timeline(points, endpoint_models.get(name, ""))
                         for name, points in data.stats_timelines.items()},
        outages=r["outages"], decision=r["decision"], cold_start=r["cold_start"], tokens=r["tokens"],
        sessions=r["sessions"], ttft_decomposition=r["ttft_decomposition"],
        tokens_by_model=by_model.rows,
        manifest=ManifestExcerpt(**{k: manifest.get(k) for k in MANIFEST_EXCERPT}), **present)
    return Analysis(data, log.frame(log.names if keep else kept), models, summary, summary_tables(summary), r["cdfs"],
                    TokenFigures(r["token_curves"], r["token_timeline"]))
