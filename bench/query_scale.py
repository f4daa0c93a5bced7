"""Benchmark: `tailrace query` on a synthetic run directory (bench/analysis_scale.py writes it) — a few questions a
serving engineer asks of a run, each a fresh `tailrace` process (imports and the clock models' fit included), its
wall time, CPU and peak resident memory, `--repeats` times, the spread shown; `tailrace analyze` of the same run
beside it once per repeat, for scale.

    .venv/bin/python bench/query_scale.py --run-dir /var/tmp/tailrace-scale/synthetic-10000000-seed1 [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.analysis_scale import Timing, timed  # noqa: E402
from bench.common import shown_command, write_section  # noqa: E402

TITLE = "Querying a run: tailrace query"
QUERIES = {
    "requests per endpoint × region and status": "SELECT endpoint, region, status, count(*) FROM requests GROUP BY ALL",
    "exact p50, p99, p99.9 per endpoint × region (successful, measured)":
        "SELECT endpoint, region, quantile_cont(latency_ns / 1e6, [0.5, 0.99, 0.999]) FROM requests "
        "WHERE status = 'ok' AND phase > 0 GROUP BY ALL",
    "p99 per second of the run on the reference clock, per region":
        "SELECT region, t_intended_ref // 1000000000 AS second, quantile_cont(latency_ns / 1e6, 0.99) "
        "FROM requests WHERE status = 'ok' GROUP BY ALL",
    "the 100 slowest requests with their trace IDs":
        "SELECT trace_id, endpoint, region, latency_ns FROM requests ORDER BY latency_ns DESC LIMIT 100",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-limit", default=None, help="each query's --memory-limit (e.g. 2GB)")
    parser.add_argument("--section", default=TITLE, help="docs/BENCHMARKS.md's section (a day's run: its own)")
    parser.add_argument("--no-analyze", action="store_true", help="leave out `tailrace analyze` (a day's run: minutes)")
    args = parser.parse_args()
    if not (args.run_dir / "manifest.json").exists():
        parser.error(f"--run-dir {args.run_dir}: not a run directory (bench/analysis_scale.py writes one)")
    tailrace = [sys.executable, "-m", "tailrace.cli"]
    times: dict[str, list[Timing]] = {name: [] for name in [*QUERIES, *([] if args.no_analyze else ["analyze"])]}
    limit = ["--memory-limit", args.memory_limit] if args.memory_limit else []
    failed: dict[str, str] = {}  # a question that could not be answered (DuckDB out of memory): its one line
    for _ in range(args.repeats):
        for name, sql in QUERIES.items():
            if name in failed:
                continue
            try:
                times[name].append(timed([*tailrace, "query", str(args.run_dir), "--sql", sql, "--csv", "/dev/null",
                                          *limit], ROOT))
            except SystemExit as exc:  # (timed: the command's exit code and the end of its stderr)
                failed[name] = str(exc).strip().splitlines()[-1].split("exited with 2: ")[-1]
        if not args.no_analyze:
            times["analyze"].append(timed([*tailrace, "analyze", str(args.run_dir), "--quiet"], ROOT))
    rows = sum(1 for _ in args.run_dir.glob("regions/*/*/requests-*.parquet"))

    def cell(xs: list[float], unit: str, digits: int = 2) -> str:
        return f"{statistics.median(xs):.{digits}f}{unit} ({min(xs):.{digits}f}–{max(xs):.{digits}f})"

    lines = ["| question | wall s | CPU s | peak RSS GiB |", "|---|---|---|---|"]
    for name, ts in times.items():
        if name in failed:
            lines.append(f"| {name} | not answered: `{failed[name]}` | | |")
            continue
        label = "`tailrace analyze` (the whole report, for scale)" if name == "analyze" else name
        lines.append(f"| {label} | {cell([t.wall for t in ts], '')} | {cell([t.cpu for t in ts], '')} | "
                     f"{max(t.peak for t in ts):.2f} |")
    body = (f"Command: `{shown_command('bench/query_scale.py', sys.argv[1:])}` — the run directory "
            f"{args.run_dir.name} ({rows:,} request chunks), {args.repeats} repeats, each a fresh `tailrace` process "
            "(imports and the clock models' fit included), its result written as CSV to /dev/null"
            + (f", DuckDB's memory limit {args.memory_limit}" if args.memory_limit else "") + "; median "
            "(min–max).\n\n" + "\n".join(lines) + "\n\nThe queries, in full: "
            + "; ".join(f"*{name}*: `{sql}`" for name, sql in QUERIES.items()) + ".")
    print(body)
    write_section(args.section, body)


if __name__ == "__main__":
    main()
