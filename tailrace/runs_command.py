"""`tailrace runs [DIR…]` — the runs found, with profile, start, verdict, requests and key percentiles, filtered —
and `tailrace runs trend PROFILE [DIR…] --metric p99` — one metric across a profile's runs with each run's interval
and its significant changes. Both read the runs' catalogue lines (contract/layout.py's HistoryLayout: kept as
reports are written, apart from the runs) and write an HTML page beside the terminal table. No server is started."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tailrace.contract.exit_codes import OK, USAGE
from tailrace.contract.layout import HistoryLayout, write_atomic
from tailrace.contract.terminal import console

DEFAULT_DIR = Path("runs")


def add_runs_command(sub) -> None:
    """`tailrace runs`."""
    runs = sub.add_parser(
        "runs", help="list the runs found (filter by profile, verdict, time), or trend a metric across a profile's runs",
        description="`tailrace runs [DIR ...]`: every run under DIR (default runs/) with its profile, start, verdict, "
                    "requests and key percentiles, oldest first. `tailrace runs trend PROFILE [DIR ...] --metric p99`: "
                    "that metric across the profile's runs, each with its 95% interval, a significant change from "
                    "the run before flagged. Each writes an HTML page beside the table.")
    runs.add_argument("args", nargs="*", metavar="[trend PROFILE] DIR", help="directories of runs (or run directories)")
    runs.add_argument("--profile", default=None, help="only this profile's runs")
    runs.add_argument("--verdict", default=None, choices=("PASS", "FAIL", "INCONCLUSIVE", "INVALID"),
                      type=str.upper, help="only runs with this verdict")
    runs.add_argument("--since", default=None, help="only runs started at or after this ISO date (UTC)")
    runs.add_argument("--until", default=None, help="only runs started before this ISO date (UTC)")
    runs.add_argument("--metric", default="p99", help="trend: p50 p90 p95 p99 p99.9 (latency), ttft_p99, tpot_p50, "
                                                      "itl_p99, e2e_p99 (streams; also _p50 _p90), error_rate")
    runs.add_argument("--endpoint", default="*", help="trend: one endpoint (default every one)")
    runs.add_argument("--region", default="*", help="trend: one region (default every one)")
    runs.add_argument("--html", type=Path, default=None, help="the page's path (default beside the catalogue: "
                                                               "$TAILRACE_HISTORY_DIR or ~/.cache/tailrace)")
    runs.add_argument("--json", action="store_true", help="the list as JSON lines instead of a table")
    runs.set_defaults(func=lambda a, p: cmd_runs(a, p), intermixed=True)  # DIR … before or after the options


def cmd_runs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tailrace.analysis.history.catalogue import catalogue, parse_when, selected

    trend_of = None
    dirs = list(args.args)
    if dirs and dirs[0] == "trend":
        if len(dirs) < 2:
            parser.error("runs trend: give the PROFILE whose runs to trend")
        trend_of, dirs = dirs[1], dirs[2:]
        from tailrace.analysis.history.trend import METRICS

        if args.metric not in METRICS:
            print(f"tailrace runs: --metric {args.metric!r}: one of {', '.join(METRICS)}", file=sys.stderr)
            return USAGE
    roots = [Path(d) for d in dirs] or [DEFAULT_DIR]
    try:
        since = parse_when(args.since) if args.since else None
        until = parse_when(args.until) if args.until else None
    except ValueError as exc:
        print(f"tailrace runs: --since/--until {exc}", file=sys.stderr)
        return USAGE
    found = catalogue(roots)
    for line in found.skipped:
        print(f"tailrace runs: skipped {line}", file=sys.stderr)
    entries = selected(found.entries, trend_of or args.profile, args.verdict, since, until)
    page = args.html
    if trend_of is not None:
        return _trend(entries, trend_of, args, page or HistoryLayout.default().trend_page(trend_of, args.metric))
    return _list(entries, found.skipped, args, page or HistoryLayout.default().list_page())


def _list(entries, skipped: list[str], args: argparse.Namespace, page: Path) -> int:
    from tailrace.analysis.history.catalogue import as_json_lines
    from tailrace.analysis.report.history_page import runs_page, when

    if args.json:
        sys.stdout.write(as_json_lines(entries))
    else:
        from rich.table import Table

        table = Table(title=f"{len(entries)} run(s), oldest first" + (f"; {len(skipped)} left out" if skipped else ""))
        settings = any(e.overrides for _, e in entries)  # a column only where some run set profile fields
        for column in ("run", "profile", *(("settings",) if settings else ()), "started (UTC)", "verdict", "requests",
                       "errors", "p50 ms", "p95 ms", "p99 ms", "TTFT p99 ms"):
            table.add_column(column, justify="left" if column in ("run", "profile", "settings", "verdict") else "right")
        for _, e in entries:
            table.add_row(e.run_id, e.profile, *((", ".join(e.overrides),) if settings else ()), when(e.start_ns),
                          e.verdict, f"{e.requests:,}", f"{e.errors:,}",
                          *(_cell(v) for v in (e.p50_ms, e.p95_ms, e.p99_ms, e.ttft_p99_ms)))
        table.caption = ("requests: all the run recorded (warm-up too); errors: the measured phases; p50–p99: the "
                         "latency table's row over every endpoint (one-shot where the run has any, else streams' E2E)")
        console().print(table)
    return _write_page(page, runs_page(entries, skipped, page), quiet=args.json)


def _trend(entries, profile: str, args: argparse.Namespace, page: Path) -> int:
    from tailrace.analysis.history.catalogue import read_headline
    from tailrace.analysis.history.trend import TrendError, trend
    from tailrace.analysis.report.history_page import trend_page, when
    from tailrace.contract.summary import SummaryError

    runs = []
    for run_dir, entry in entries:
        try:
            runs.append((entry, read_headline(run_dir)))
        except SummaryError as exc:  # changed since it was catalogued
            print(f"tailrace runs: skipped {exc}", file=sys.stderr)
    if not runs:
        print(f"tailrace runs: no analysed run of profile {profile!r} found", file=sys.stderr)
        return USAGE
    try:
        t = trend(runs, profile, args.metric, args.endpoint, args.region)
    except TrendError as exc:
        print(f"tailrace runs: {exc}", file=sys.stderr)
        return USAGE
    from rich.table import Table

    table = Table(title=f"{profile}: {t.metric} ({t.unit}) across {len(t.points)} run(s), endpoint {t.endpoint}, "
                        f"region {t.region} — * a significant change from the run before (p < 0.05); a run with "
                        "other settings (--set, a sweep's point) is not judged against it")
    for column in ("run", "started (UTC)", "verdict", "value", "95% interval", "change", "p"):
        table.add_column(column, justify="left" if column in ("run", "verdict") else "right")
    for p in t.points:
        change = (f"settings: {', '.join(p.settings_changed)}" if p.settings_changed else "–" if p.change is None else
                  f"{p.change:+,.3g}" + (f" ({p.relative:+.1%})" if p.relative is not None else "")
                  + (" *" if p.significant else ""))
        table.add_row(p.run_id, when(p.start_ns), p.verdict, _cell(p.value), f"[{_cell(p.ci_low)}, {_cell(p.ci_high)}]",
                      change, "–" if p.p_value is None else f"{p.p_value:.3g}")
    console().print(table)
    return _write_page(page, trend_page(t))


def _cell(v: float | None) -> str:
    return "–" if v is None else f"{v:,.3g}" if abs(v) < 1 else f"{v:,.2f}"


def _write_page(page: Path, text: str, quiet: bool = False) -> int:
    try:
        write_atomic(page, text)
    except OSError as exc:
        print(f"tailrace runs: the page {page} could not be written ({exc.strerror or exc}); the table above stands",
              file=sys.stderr)
        return OK
    if not quiet:
        print(f"page: {page}")
    return OK
