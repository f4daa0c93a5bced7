"""`tailrace query RUN_DIR… --sql "SELECT …"` — SQL over runs' requests where they lie (analysis/query.py: DuckDB):
a table on the terminal, or the whole result as CSV or JSON lines. `--schema`: the views and their columns."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from tailrace.contract.exit_codes import OK, USAGE
from tailrace.contract.terminal import console

# what the views add to contract/records.py's columns
EXTRA_MEANINGS = {
    "run": "the run directory's name (its path where two share a name)",
    "t_intended_ref": "t_intended on the reference clock (epoch ns; the analysis' clock model, to the ns)",
    "t_sent_ref": "t_sent on the reference clock (epoch ns)",
    "t_done_ref": "t_done on the reference clock (epoch ns)",
}
MODEL_MEANINGS = {
    "worker": "generator worker", "t0_ns": "the model's origin (worker clock, epoch ns)",
    "intercept_ns": "offset at t0 (reference - worker clock, ns)", "slope": "offset drift, ns per ns of worker clock",
    "uncertainty_ns": "the model's uncertainty (ns)", "samples_used": "clock samples fitted",
    "samples_total": "clock samples taken"}
EXAMPLES = """examples:
  # p99 (ms) per endpoint and region in phase 2, successful requests
  tailrace query RUN --sql "SELECT endpoint, region, quantile_cont(latency_ns / 1e6, 0.99) AS p99_ms
                            FROM requests WHERE phase = 2 AND status = 'ok' GROUP BY ALL ORDER BY ALL"
  # the slowest requests with their trace IDs, to find in the server's traces
  tailrace query RUN --sql "SELECT trace_id, endpoint, region, latency_ns / 1e6 AS ms FROM requests
                            ORDER BY latency_ns DESC LIMIT 20"
  # errors per second on the reference clock, every region together, as CSV
  tailrace query RUN --csv - --sql "SELECT t_intended_ref // 1000000000 AS second, count(*) FILTER (status <> 'ok')
                                    AS errors FROM requests GROUP BY ALL ORDER BY ALL"
  # two builds side by side (each run's `run` is its directory's name)
  tailrace query runs/A runs/B --sql "SELECT run, quantile_cont(ttft_ns / 1e6, 0.99) FROM requests
                                      WHERE ttft_ns >= 0 GROUP BY run"
"""
VIEWS = ("requests", "clock", "clock_models")
WIDE_COLUMNS = 10  # a result with more columns is shown a row a block


def add_query_command(sub) -> None:
    """`tailrace query`."""
    query = sub.add_parser(
        "query", help="SQL over runs' requests where they lie (DuckDB): what the report does not answer",
        description="Answer a SQL query over the request chunks of RUN_DIR (several: one set, told apart by the "
                    "`run` column). Views: requests (one row per request, with t_intended_ref, t_sent_ref, "
                    "t_done_ref on the reference clock), clock (the clock samples), clock_models (each worker's "
                    "fitted offset). The chunks are read in place, out of core. Exit code: 0 answered, 2 bad input.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    query.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    query.add_argument("--sql", default=None, help="the query (DuckDB SQL); - reads it from stdin")
    query.add_argument("--schema", action="store_true", help="list the views' columns, their types and meanings")
    query.add_argument("--csv", default=None, metavar="PATH", help="write the whole result as CSV (- : stdout)")
    query.add_argument("--json", default=None, metavar="PATH", help="write the whole result as JSON lines (- : stdout)")
    query.add_argument("--limit", type=int, default=40, help="rows shown on the terminal (default %(default)s)")
    query.add_argument("--memory-limit", default=None, metavar="SIZE",
                       help="DuckDB's memory limit, e.g. 2GB (default: DuckDB's, 80%% of memory); past it, "
                            "sorts and joins spill to a temporary directory")
    query.set_defaults(func=lambda a, p: cmd_query(a, p))


def cmd_query(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.schema == (args.sql is not None):
        parser.error("give --sql QUERY, or --schema")
    if args.csv is not None and args.json is not None:
        parser.error("--csv and --json: give one")
    if args.limit < 1:
        parser.error(f"--limit {args.limit}: at least 1")
    try:
        import duckdb  # noqa: F401
    except ImportError:
        print("tailrace query: needs tailrace[analysis] (duckdb is not installed): pip install 'tailrace[analysis]'",
              file=sys.stderr)
        return USAGE
    from tailrace.analysis.query import QueryError, RunQuery

    sql = sys.stdin.read() if args.sql == "-" else args.sql
    if sql is not None and not sql.strip():
        print("tailrace query: --sql: the query is empty", file=sys.stderr)
        return USAGE
    try:
        runs = RunQuery(args.run_dirs, memory_limit=args.memory_limit)
        if args.schema:
            _print_schema(runs)
            code = OK
        elif args.csv is not None or args.json is not None:
            code = _export(runs, sql, "csv" if args.csv is not None else "json", args.csv or args.json)
        else:
            _print_answer(runs.answer(sql, args.limit), args.limit)
            code = OK
    except QueryError as exc:
        print(f"tailrace query: {exc}", file=sys.stderr)
        return USAGE
    for why in runs.skipped_runs.values():
        print(f"tailrace query: skipped {why}", file=sys.stderr)
    for path, why in runs.left_out.items():
        print(f"tailrace query: left out {path}: {why}", file=sys.stderr)
    return code


def _export(runs, sql: str, kind: str, destination: str) -> int:
    path = Path("/dev/stdout") if destination == "-" else Path(destination)
    if destination != "-" and not path.parent.is_dir():
        print(f"tailrace query: --{kind} {destination}: no directory {path.parent}", file=sys.stderr)
        return USAGE
    sys.stdout.flush()
    written = runs.export(sql, kind, path)
    if destination != "-":
        print(f"{written:,} rows → {path}", file=sys.stderr)
    return OK


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) and abs(value) >= 1e15 else f"{value:.6g}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(value))} bytes>"
    return str(value)


def _print_answer(answer, limit: int) -> None:
    from rich.table import Table

    if not answer.names:
        console().print("done (no rows to show)")
        return
    shown = len(answer.rows)
    title = (f"first {shown} rows (more: --limit N, or the whole result with --csv / --json)" if answer.more
             else f"{shown} row{'s' * (shown != 1)}")
    if len(answer.names) > WIDE_COLUMNS:  # one row a block, a column a line (psql's expanded display)
        console().print(title)
        width = max(len(n) for n in answer.names)
        for i, row in enumerate(answer.rows, 1):
            console().print(f"[bold]── row {i} ──[/bold]")
            for name, value in zip(answer.names, row):
                console().print(f"{name:<{width}}  {_cell(value)}", markup=False, highlight=False)
        return
    table = Table(title=title, title_justify="left")
    for name, kind in zip(answer.names, answer.types):
        numeric = any(t in kind for t in ("INT", "DOUBLE", "FLOAT", "DECIMAL", "HUGEINT"))
        table.add_column(name, justify="right" if numeric else "left", overflow="fold")
    for row in answer.rows:
        table.add_row(*(_cell(v) for v in row))
    console().print(table)


def _print_schema(runs) -> None:
    from rich.table import Table

    from tailrace.contract.records import CLOCK_FIELDS, REQUEST_FIELDS

    meanings = {**{n: m for n, _, m in REQUEST_FIELDS}, **EXTRA_MEANINGS}
    clock_meanings = {n: m for n, _, m in CLOCK_FIELDS}
    for view in VIEWS:
        table = Table(title=view, title_justify="left")
        for column in ("column", "type", "meaning"):
            table.add_column(column, overflow="fold")
        for name, kind, *_ in runs.con.execute(f"DESCRIBE {view}").fetchall():
            of_view = {"clock": clock_meanings, "clock_models": MODEL_MEANINGS}.get(view, meanings)
            table.add_row(name, kind, of_view.get(name, EXTRA_MEANINGS.get(name, "")))
        console().print(table)
