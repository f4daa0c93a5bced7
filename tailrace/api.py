"""tailrace from Python (notebooks, scripts): run a profile, load a run's requests into one DataFrame on the
reference clock, analyse, compare. docs/API.md shows each call; tests/integration/tailrace/test_api.py runs those
examples as written. These names are the stable surface; everything else may move."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tailrace.contract.layout import ReportLayout
from tailrace.results import CompareRow, Comparison, Estimate, LatencyRow, SloVerdict, Summary, TokenRow

__all__ = ["AnalysisResult", "CompareRow", "Comparison", "Estimate", "LatencyRow", "RunResult", "SloVerdict", "Summary",
           "TokenRow", "analyze", "compare", "load_requests", "run"]


@dataclass(frozen=True)
class RunResult:
    """A finished run: where it is, its verdict and exit code (README "Exit codes"), and its summary (typed; the
    summary.json dict is `summary.to_dict()`)."""

    run_dir: Path
    verdict: str
    exit_code: int
    summary: Summary


@dataclass(frozen=True)
class AnalysisResult:
    """A run directory analysed: its summary (typed), the report's tables as DataFrames, and every request."""

    summary: Summary
    tables: dict[str, pd.DataFrame]
    requests: pd.DataFrame


def run(profile: str | Path, out: str | Path | None = None, overrides: Sequence[str] = (),
        quiet: bool = True) -> RunResult:
    """Run a profile on this machine (as `tailrace run` does: its endpoints, region proxies, Locust master and
    workers), analyse it and write its report. `overrides`: `field.path=value` (as `--set`). Raises
    contract.profile.ProfileError (the message names the field) for a bad profile or override, before anything
    starts."""
    from tailrace.contract.profile import load_profile
    from tailrace.harness.orchestration.local_run import run_local
    from tailrace.harness.orchestration.preflight import check_local

    loaded = load_profile(Path(profile), list(overrides))
    out_dir = Path(out) if out is not None else Path(loaded.output_dir)
    check_local(loaded, out_dir)
    run_dir, _ = run_local(loaded, out_dir, quiet=quiet)
    summary = analyze(run_dir, write_report=True).summary
    return RunResult(Path(run_dir).resolve(), summary.verdict, summary.exit_code, summary)


def analyze(run_dir: str | Path, write_report: bool = False) -> AnalysisResult:
    """The analysis of a run directory: its summary (typed: `.latency`, `.tokens`, `.slos`, `.verdict`; the dict is
    `.to_dict()`), the report's tables as DataFrames, and every request; `write_report` also writes RUN_DIR/report."""
    from tailrace.analysis.analyze import analyze_run
    from tailrace.analysis.analyze_command import write_outputs

    analysis = analyze_run(Path(run_dir))
    if write_report:
        write_outputs(analysis, ReportLayout.of_run(Path(run_dir)).dir)
    return AnalysisResult(analysis.summary, analysis.tables, analysis.requests)


def load_requests(run_dir: str | Path) -> pd.DataFrame:
    """Every request of a run in one DataFrame: the request log's columns (contract/records.py) plus the worker
    clock's timestamps moved to the reference clock (`t_intended_ref`, `t_sent_ref`, `t_done_ref`, …: each
    worker's fitted offset and drift applied, so regions line up on one timeline)."""
    from tailrace.analysis.read.clock_correction import add_reference_times, fit_all
    from tailrace.analysis.read.rundir import load_run

    data = load_run(Path(run_dir))
    return add_reference_times(data.requests, fit_all(data.clock))


def query(run_dirs: str | Path | Sequence[str | Path], sql: str) -> pd.DataFrame:
    """A SQL query (DuckDB) over runs' requests where they lie, as a DataFrame — `tailrace query`'s views:
    `requests` (every request, `t_*_ref` on the reference clock), `clock`, `clock_models`; several runs are told
    apart by `run` (docs/METHODS.md#querying-runs). Raises analysis.query.QueryError (one line) on bad input."""
    from tailrace.analysis.query import RunQuery

    dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    return RunQuery([Path(d) for d in dirs]).frame(sql)


def compare(run_a: str | Path, run_b: str | Path, pairing: str = "auto") -> Comparison:
    """B − A per endpoint × region (p50/p95/p99 differences with 95% intervals, a test's p-value, Cohen's d, a
    verdict), as `tailrace compare` prints it. `pairing`: "auto" (pair requests by schedule position when the runs
    share a seed and load), "paired" or "unpaired". `.invalid_reasons`: why either run is INVALID (each reason
    naming run A or B; empty when both are valid), where `tailrace compare` exits 4."""
    from tailrace.analysis.decide.compare import compare_runs

    if pairing not in ("auto", "paired", "unpaired"):
        raise ValueError(f"pairing must be 'auto', 'paired' or 'unpaired', got {pairing!r}")
    paired = {"auto": None, "paired": True, "unpaired": False}[pairing]
    invalid: list[str] = []
    rows = compare_runs(Path(run_a), Path(run_b), paired, invalid=invalid)
    return Comparison(rows, invalid)
