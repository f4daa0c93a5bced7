"""`tailrace analyze`: analyse a run directory, write the report, print a summary, return the exit code."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tailrace.analysis.report.figures import Figures, start_figures
from tailrace.contract.exit_codes import INTERNAL, INVALID, USAGE
from tailrace.contract.layout import ReportLayout, write_atomic

if TYPE_CHECKING:
    from tailrace.contract.summary import Estimate, RunSummary


def write_outputs(analysis, out: Path, figures: Figures | None = None) -> None:
    """The report directory `out` (contract/layout.py's ReportLayout: index.html, summary.json, junit.xml,
    tables/*.csv), each file written whole; `figures`: who draws the report's figures (analysis/report/figures.py;
    default: drawn here)."""
    from tailrace.analysis.report.html import render
    from tailrace.analysis.report.junit import junit_xml

    report = ReportLayout(Path(out))
    write_atomic(report.summary, analysis.summary.to_json())
    for name, table in analysis.tables.items():
        write_atomic(report.table(name), table.to_csv(index=False))
    write_atomic(report.junit, junit_xml(analysis.summary))
    write_atomic(report.page, render(analysis, figures))
    run_dir = Path(analysis.data.run_dir)
    if report.dir.resolve() == ReportLayout.of_run(run_dir).dir.resolve():  # the run's own report: catalogued
        from tailrace.analysis.history.catalogue import record_run

        try:
            record_run(run_dir, analysis.summary)
        except OSError:
            pass  # a directory of runs this user cannot write to: `tailrace runs` reads the summary instead


def _number(v: float | None, digits: int = 0) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


def _estimate_cell(e: Estimate) -> str:
    if e.value is None:
        return f"needs ≥ {e.min_samples}"
    return f"{e.value:.1f}" + ("" if e.ci_low is None else f" [{e.ci_low:.1f}, {e.ci_high:.1f}]")


def _print_pipelines(console, summary: RunSummary) -> None:
    """The pipelines table: how they ended, E2E and TTFT from the arrival, and each stage's p99."""
    from rich.table import Table

    if summary.pipelines is None or not summary.pipelines.pipelines:
        return
    table = Table(title="pipelines (ms from the arrival's intended send; [95% CI]; stages: p99 from their own)")
    for col in ("pipeline", "region", "done/started", "failed", "goodput/s", "E2E p50", "E2E p99", "TTFT p99",
                "stages p99"):
        table.add_column(col, justify="right")
    for r in summary.pipelines.pipelines:
        stages = ", ".join(f"{s.endpoint} {_number(s.latency_ms.at('p99').value, 1)}" for s in r.stages)
        table.add_row(r.pipeline, r.region, f"{r.done:,}/{r.started:,}", f"{r.failed:,}", _number(r.goodput_per_s, 2),
                      _estimate_cell(r.e2e_ms.at("p50")), _estimate_cell(r.e2e_ms.at("p99")),
                      _estimate_cell(r.ttft_ms.at("p99")), stages)
    console.print(table)


def _print_cancellations(console, summary: RunSummary) -> None:
    """Cancelled streams: the rate, what the server streamed to them, the server's own abort count."""
    from rich.table import Table

    if not summary.cancellations:
        return
    table = Table(title="cancelled streams (closed by the client as declared; in no percentile, no error rate)")
    for col in ("endpoint", "region", "cancelled", "rate [95% CI]", "before 1st token", "tokens served",
                "server's aborted"):
        table.add_column(col, justify="right")
    for r in summary.cancellations:
        table.add_row(r.endpoint, r.region, f"{r.cancelled:,}/{r.requests:,}", r.rate_text, f"{r.before_first_token:,}",
                      f"{r.tokens_received:,}", "–" if r.server_aborted is None else
                      f"{r.server_aborted:,} (ours {r.cancelled_server_scope:,})")
    console.print(table)


def _print_accuracy(console, summary: RunSummary) -> None:
    """Graded answers: accuracy per endpoint over the measured phases and by phase (every region), the answers not
    the model's counted apart, correct goodput; each trend against load in a line."""
    from rich.table import Table

    rows = [r for r in summary.accuracy if r.region == "*"]
    if not rows:
        return
    table = Table(title="accuracy under load (graded answers; [95% CI]; truncated and cut counted apart)")
    for col in ("endpoint", "phase", "offered /s", "judged", "accuracy [95% CI]", "truncated", "cut", "errors",
                "correct goodput /s"):
        table.add_column(col, justify="right")
    for r in sorted(rows, key=lambda r: (r.endpoint, r.phase == 0, r.phase)):
        share = "–" if r.accuracy is None else f"{r.accuracy:.1%}" + (
            f" [{r.ci_low:.1%}, {r.ci_high:.1%}]" if r.ci_low is not None and r.ci_high is not None else "")
        table.add_row(r.endpoint, "all" if r.phase == 0 else str(r.phase), _number(r.offered_rps, 1),
                      f"{r.judged:,}", share, f"{r.truncated:,}", f"{r.cut:,}", f"{r.error + r.grader_error:,}",
                      _number(r.correct_goodput_rps, 2))
    console.print(table)
    for tr in summary.accuracy_trends:
        if tr.verdict != "not tested" and tr.p_value is not None:
            console.print(f"{tr.endpoint}: accuracy {tr.verdict} as load rises ({(tr.change or 0) * 100:+.1f} points "
                          f"from {tr.loads[0]:g} to {tr.loads[-1]:g} req/s, p = {tr.p_value:.2g})")


def _print_hardware(console, summary: RunSummary) -> None:
    """What the hardware did per monitor × phase; energy measured, or an estimate labelled as one."""
    from rich.table import Table

    if summary.hardware is None or not summary.hardware.rows:
        return
    table = Table(title="what the hardware did (per measured phase)")
    for col in ("monitor", "phase", "CPU busy %", "process cores", "GPU util %", "memory max MiB", "power W", "energy J",
                "mJ / request"):
        table.add_column(col, justify="right")
    for r in summary.hardware.rows:
        estimated = r.energy_j is None and r.estimated_energy_j is not None
        energy = r.estimated_energy_j if estimated else r.energy_j
        per_request = r.estimated_energy_per_request_mj if estimated else r.energy_per_request_mj
        table.add_row(r.monitor, str(r.phase), _number(r.cpu_busy_pct, 1), _number(r.process_cores, 2),
                      _number(r.gpu_util_pct, 1), _number(r.memory_max_bytes / 2**20 if r.memory_max_bytes else None),
                      _number(r.power_w, 1), ("≈ " if estimated else "") + _number(energy, 1),
                      ("≈ " if estimated else "") + _number(per_request, 2))
    console.print(table)
    if summary.hardware.endpoints:
        table = Table(title="per endpoint: the utilization law U = X·S, and energy per request")
        for col in ("monitor", "endpoint", "phase", "X /s", "S ms", "ρ", "measured U", "U = X·S",
                    "mJ / request (≈: its model's compute only)"):
            table.add_column(col, justify="right")
        for e in summary.hardware.endpoints:
            estimated = e.energy_per_request_mj is None and e.estimated_energy_per_request_mj is not None
            table.add_row(e.monitor, e.endpoint, str(e.phase), _number(e.throughput_rps, 1),
                          _number(e.mean_service_ms, 2), _number(e.rho, 2), _number(e.measured_utilization, 2),
                          e.utilization_law or "–", ("≈ " if estimated else "") + _number(
                              e.estimated_energy_per_request_mj if estimated else e.energy_per_request_mj, 2))
        console.print(table)
    if any(r.energy_j is None and r.estimated_energy_j is not None for r in summary.hardware.rows) or any(
            r.estimated_energy_per_request_mj is not None for r in summary.hardware.endpoints):
        console.print("≈: an estimate (CPU-seconds × the declared watts per core), not a measurement")


def print_summary(summary: RunSummary) -> None:
    """A rich terminal summary: verdict, SLOs, latency per region × endpoint."""
    from rich.markup import escape
    from rich.table import Table

    from tailrace.analysis.report.verdict_grid import not_passing, why_words
    from tailrace.contract.terminal import console as terminal_console

    console = terminal_console()
    colour = _COLOURS[summary.verdict]
    console.print(f"[bold {colour}]{summary.verdict}[/] run {summary.run_id} — {summary.input.rows_read:,} requests")
    labels = {"invalid": "[magenta]INVALID[/]:", "warning": "[yellow]warning[/]:", "skipped": "[red]skipped[/]"}
    for kind, text in summary.notices():
        console.print(f"{labels[kind]} {text}")
    _print_verdict_grid(console, summary)
    lat = Table(title="latency from intended send time (ms)")
    for col in ("endpoint", "region", "n", "errors", "p50", "p99 [95% CI]", "p99.9", "accuracy"):
        lat.add_column(col, justify="right")
    mixed = bool(summary.tokens) and any(r.kind == "one-shot" for r in summary.latency)
    for r in summary.latency:
        p50, p99, p999 = r.p50, r.p99, r.percentiles["p99.9"]
        overall = r.endpoint == "*" and r.region == "*"
        lat.add_row(f"* ({r.kind})" if overall and mixed else r.endpoint, r.region, f"{r.count:,}", f"{r.errors:,}",
                    "–" if p50.value is None else f"{p50.value:.2f}",
                    f"needs ≥ {p99.min_samples}" if p99.value is None else
                    f"{p99.value:.2f} \\[no interval: worth {p99.effective_n:,} independent]" if p99.ci_low is None else
                    f"{p99.value:.2f} [{p99.ci_low:.2f}, {p99.ci_high:.2f}]",
                    f"needs ≥ {p999.min_samples}" if p999.value is None else f"{p999.value:.2f}",
                    "–" if r.accuracy is None else f"{r.accuracy:.4f}")
    console.print(lat)
    if summary.tokens:
        tokens = Table(title="streamed responses (ms from intended send time; [95% CI])")
        for col in ("endpoint", "region", "ok", "tokens/s", "TTFT p50", "TTFT p99", "TPOT p50", "ITL p99", "E2E p99"):
            tokens.add_column(col, justify="right")
        cell = _estimate_cell
        for t in [*summary.tokens, *(r.model_copy(update={"endpoint": f"{r.endpoint} · {r.model}"})
                                     for r in summary.tokens_by_model)]:
            tokens.add_row(t.endpoint, t.region, f"{t.ok:,}/{t.requests:,}", f"{t.output_tokens_per_s:.0f}",
                           cell(t.ttft_ms.at("p50")), cell(t.ttft_ms.at("p99")), cell(t.tpot_ms.at("p50")),
                           cell(t.itl_ms.at("p99")), cell(t.e2e_ms.at("p99")))
        console.print(tokens)
    for rows, unit, title in ((summary.embeddings, "inputs", "embeddings (inputs: the texts requests carried"),
                              (summary.rerank, "documents", "rerank (documents: those requests asked to score")):
        if not rows:
            continue
        table = Table(title=f"{title}; tokens: the server's usage)")
        for col in ("endpoint", "region", "ok", f"{unit}/s", f"{unit}/request", "input tokens/s", f"goodput {unit}/s"):
            table.add_column(col, justify="right")
        for e in rows:
            table.add_row(e.endpoint, e.region, f"{e.ok:,}/{e.requests:,}", _number(e.inputs_per_s, 1),
                          _number(e.mean_inputs_per_request, 2), _number(e.input_tokens_per_s),
                          _number(e.good_inputs_per_s, 1))
        console.print(table)
    _print_pipelines(console, summary)
    _print_accuracy(console, summary)
    _print_cancellations(console, summary)
    _print_hardware(console, summary)
    _print_decision(console, summary)
    for v in not_passing(summary.slos):
        console.print(f"[{_COLOURS[v.verdict]}]{v.verdict}[/] {escape(why_words(v))}")


_COLOURS = {"PASS": "green", "FAIL": "red", "INCONCLUSIVE": "yellow", "INVALID": "magenta"}


def _print_decision(console, summary: RunSummary) -> None:
    """A `[decision]`'s answer, as the report's section opens with it: the variant to ship, the ranking, caveats."""
    from rich.markup import escape

    d = summary.decision
    if d is None:
        return
    ranking = f" (ranking: {' > '.join(d.ranking)})" if d.ranking else ""
    console.print(f"[bold]decision[/]: ship {escape(d.recommended)}{escape(ranking)}" if d.recommended else
                  "[bold]decision[/]: none — no variant meets every constraint")
    for caveat in d.caveats:
        console.print(f"[yellow]caveat[/]: {escape(caveat)}")


def _print_verdict_grid(console, summary: RunSummary) -> None:
    """The SLO verdicts at a glance: a row per SLO and endpoint, a column per region and '*'."""
    from rich.markup import escape
    from rich.table import Table

    from tailrace.analysis.report.verdict_grid import verdict_grid

    if not summary.slos:
        return
    regions, rows = verdict_grid(summary.slos)
    grid = Table(title="SLO verdicts (measured value; details in the report)")
    grid.add_column("SLO")
    grid.add_column("endpoint")
    for region in regions:
        grid.add_column(region)
    for row in rows:
        cells = []
        for region in regions:
            text = row.cell(region)
            verdict = text.split(" ", 1)[0]
            cells.append(f"[{_COLOURS[verdict]}]{escape(text)}[/]" if verdict in _COLOURS else text)
        grid.add_row(escape(row.description), escape(row.endpoint), *cells)
    console.print(grid)


def analyze_and_report(run_dir: Path, out: Path | None, quiet: bool = False, exits: bool = False,
                       figures: Figures | None = None, span_files: tuple[Path, ...] = (),
                       export=None, command: str = "tailrace analyze") -> int:
    """Analyse `run_dir`, write the report, print the summary; returns the exit code. `exits`: this process
    exits after it (the CLI, a master after its run), so it may keep the memory it frees
    (analysis/read/process_memory.py's `settle`). The report's figures are drawn by a
    process of their own while the statistics compute (analysis/report/figures.py; `figures`: one already started).
    `export`: a profile's `[otel.export]`, sent once the report is written from the rows the analysis read and
    corrected (the run is read once), its lines said as `command`."""
    if exits:  # before any thread starts (the figure process' pipe, Arrow's): analysis/read/process_memory.py
        from tailrace.analysis.read import process_memory

        process_memory.settle()
    # first, before this process imports the statistics: it imports matplotlib meanwhile (this module imports
    # nothing heavy at its top, so that `tailrace analyze` gets here at once)
    figures = figures or start_figures()
    try:
        return _analyze_and_report(run_dir, out, quiet, exits, figures, span_files, export, command)
    finally:
        figures.close()


def _analyze_and_report(run_dir: Path, out: Path | None, quiet: bool, exits: bool, figures: Figures,
                        span_files: tuple[Path, ...] = (), export=None, command: str = "tailrace analyze") -> int:
    from tailrace.analysis.analyze import analyze_run
    from tailrace.analysis.otel.server_spans import SpanFileError
    from tailrace.analysis.read.progress import Progress
    from tailrace.analysis.read.rundir import (
        ANALYSIS_COLUMNS,
        RunDirError,
        analyze_bytes_per_row,
        check_fits,
        request_rows,
    )

    try:
        rows = request_rows([Path(run_dir)])
        check_fits([Path(run_dir)], analyze_bytes_per_row(rows), "analyse", rows)
        retain: tuple[str, ...] = ()
        if export is not None:  # and what the spans carry: the run is read and corrected once for both
            from tailrace.analysis.otel.spans import SPAN_COLUMNS

            retain = SPAN_COLUMNS
        progress = Progress() if not quiet else None  # on a terminal only, after a few seconds
        try:
            analysis = analyze_run(Path(run_dir), ANALYSIS_COLUMNS, figures=figures, span_files=span_files,
                                   retain=retain, progress=progress)  # only what the report reads (and the spans)
        finally:
            if progress is not None:
                progress.done()
    except (RunDirError, SpanFileError) as exc:
        print(f"tailrace analyze: {exc}", file=sys.stderr)
        return USAGE
    for s in analysis.data.skipped:
        print(f"tailrace analyze: skipped {s.path}: {s.reason}", file=sys.stderr)
    out = out or ReportLayout.of_run(Path(run_dir)).dir
    try:
        write_outputs(analysis, out, figures)
    except OSError as exc:  # a full or read-only disk: the verdict is still printed, nothing measured is lost
        if not quiet:
            print_summary(analysis.summary)
        print(f"tailrace analyze: the report could not be written to {out} ({exc}); the run directory is "
              f"unchanged — tailrace analyze {run_dir} --out DIR writes it elsewhere", file=sys.stderr)
        code = analysis.summary.exit_code
        return code if code == INVALID else INTERNAL  # an INVALID run stays INVALID; otherwise the machine failed
    if not quiet:
        print_summary(analysis.summary)
        print(f"report: {ReportLayout(out).page}")
    if export is not None:
        from tailrace.analysis.otel.export import export_after_run

        export_after_run(Path(run_dir), export, command, analysis)  # what it could not send is said, never fatal
    return analysis.summary.exit_code
