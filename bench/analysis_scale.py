"""Benchmark: `tailrace analyze` and `tailrace compare` on large synthetic run directories (bench/synthetic_run.py:
3 regions × 2 workers, 3 endpoints, errors, clock samples, a warm-up and a rate step).

Each command runs as its own process, timed end to end (imports, reading, statistics, the report with its
plots) with its peak RSS from the kernel (wait4). The run directories are written once under --work and reused.
Targets (issue: columnar speed): analyze 10 M rows at ≥ 3,000,000 rows/s (under 4 s, imports included) in
< 1 GiB; analyze 100 M rows (a day at ~1,200 req/s) in < 60 s and < 2 GiB (`--analyze-only`); compare two 10 M-row
runs in < 2 min and < 8 GiB (the earlier issue's).
`--baseline DIR` (a checkout of another commit, e.g. `git worktree add DIR REV`) also runs that tree's
`tailrace analyze` on the same run directory, alternating with this one's, and reports the ratio of their
times per repeat: a change measured side by side, not against a number from another day — and checks that both
trees wrote the same summary.json, every field (the analysis's numbers unchanged at this scale).

    .venv/bin/python bench/analysis_scale.py [--rows 10000000] [--repeats 3] [--work /var/tmp/tailrace-scale]
                                             [--baseline DIR] [--analyze-only] [--keep-mib N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import link_rooms, write_section  # noqa: E402
from bench.synthetic_run import Shape, write_synthetic_run  # noqa: E402

COMMAND = ".venv/bin/python bench/analysis_scale.py"
TAILRACE = [sys.executable, "-m", "tailrace.cli"]


def analyze_argv(keep_mib: int | None) -> list[str]:
    """`tailrace analyze`, or with `keep_mib`: the same with the reader's kept columns within that many MiB
    (analysis/read/chunks.py KEEP_BYTES) — the path of a log that does not fit, at a fraction of its rows."""
    if keep_mib is None:
        return [*TAILRACE, "analyze"]
    code = ("import sys; import tailrace.analysis.read.chunks as chunks; "
            f"chunks.KEEP_BYTES = {keep_mib * 2**20}; from tailrace.cli import main; sys.exit(main())")
    return [sys.executable, "-c", code, "analyze"]


class Timing(NamedTuple):
    wall: float  # s
    peak: float  # resident GiB
    code: int
    cpu: float  # user + system CPU s, the process and the children it waited for (the figure process)


def timed(argv: list[str], cwd: Path | None = None) -> Timing:
    """Wall s, peak RSS GiB, exit code and CPU s of one process (`cwd`: the tree whose packages it imports). On
    this 2-core VM the CPU seconds are the steadier measure of work: the wall time moves with what else runs."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1, 3, 4):  # a verdict; anything else is the command failing
        raise SystemExit(f"{' '.join(argv)} exited with {code}: {proc.stderr.read().decode()[-2000:]}")
    return Timing(wall, usage.ru_maxrss / 2**20, code, usage.ru_utime + usage.ru_stime)


def summary_differences(a: object, b: object, path: str = "") -> list[str]:
    """Where two summary.json documents differ (a dotted path each; empty: the same, bit by bit)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b))
                for d in (summary_differences(a[k], b[k], f"{path}.{k}") if k in a and k in b else [f"{path}.{k}"])]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in summary_differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path or "."]


def run_dir(work: Path, rows: int, seed: int, chunks: int = Shape.chunks) -> Path:
    path = work / (f"synthetic-{rows}-seed{seed}" + (f"-chunks{chunks}" if chunks != Shape.chunks else ""))
    if not (path / "manifest.json").exists():
        print(f"writing {rows:,} rows in {chunks:,} chunks → {path}", flush=True)
        write_synthetic_run(path, Shape(rows, chunks=chunks, seed=seed))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/tailrace-scale"))
    ap.add_argument("--baseline", type=Path, default=None, help="a checkout of another commit to time alongside")
    ap.add_argument("--chunks", type=int, default=Shape.chunks,
                    help="chunks to write the rows in (a low rate's run: many small ones, a chunk every 0.25 s a worker)")
    ap.add_argument("--analyze-only", action="store_true",
                    help="time `analyze` only (no second run directory, no compare): the day-long 100 M-row run")
    ap.add_argument("--keep-mib", type=int, default=None,
                    help="the reader's kept columns within this many MiB (default 2,048): 200 on 10 M rows reads them "
                         "as a 100 M-row log is read, in a tenth of the time")
    args = ap.parse_args()
    if args.baseline is not None and not (args.baseline / "analysis" / "analyze.py").exists():
        ap.error(f"--baseline {args.baseline}: not a tailrace checkout (no analysis/analyze.py)")
    if args.baseline is not None:
        link_rooms(args.baseline)  # else its `tailrace analyze` would run this tree's analysis
    a = run_dir(args.work, args.rows, 1, args.chunks)
    b = None if args.analyze_only else run_dir(args.work, args.rows, 2, args.chunks)
    chunk_count = len(list(a.glob("regions/*/*/requests-*.parquet")))
    size = sum(p.stat().st_size for p in a.rglob("*.parquet")) / 2**20
    results: dict[str, list[Timing]] = {"analyze": []} if b is None else {"analyze": [], "compare": []}
    baseline: list[Timing] = []
    differ: list[str] = []  # where this tree's summary.json differs from the baseline's, any repeat
    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="tailrace-scale-") as tmp:
        for r in range(args.repeats):
            if args.baseline is not None:  # alternated with this tree's run: both see the same machine noise
                baseline.append(timed([*analyze_argv(args.keep_mib), str(a), "--quiet", "--out",
                                       f"{tmp}/baseline-{r}"], cwd=args.baseline))
            results["analyze"].append(timed([*analyze_argv(args.keep_mib), str(a), "--quiet", "--out",
                                             f"{tmp}/report-{r}"], cwd=here))
            if args.baseline is not None:
                ours, theirs = (json.loads(Path(f"{tmp}/{name}-{r}/summary.json").read_text())
                                for name in ("report", "baseline"))
                differ += summary_differences(ours, theirs)
            if b is not None:
                results["compare"].append(timed([*TAILRACE, "compare", str(a), str(b)], cwd=here))
            print(" | ".join(f"{k}: {v[-1].wall:.1f} s, {v[-1].cpu:.1f} CPU-s, {v[-1].peak:.2f} GiB"
                             for k, v in results.items()), flush=True)
    flags = (" --baseline DIR" if args.baseline is not None else "") + (
        f" --chunks {args.chunks}" if args.chunks != Shape.chunks else "") + (
        " --analyze-only" if args.analyze_only else "") + (f" --keep-mib {args.keep_mib}" if args.keep_mib else "")
    lines = [f"Command: `{COMMAND} --rows {args.rows} --repeats {args.repeats}{flags}` (run directories of {args.rows:,} "
             f"rows each: {size:,.0f} MiB of Parquet chunks, {chunk_count:,} chunks, 6 workers in 3 regions, 3 endpoints).",
             "",
             "| command | wall s (median) | spread over repeats | CPU s (median, spread) | rows/s (median) | peak RSS (max) |",
             "|---|---|---|---|---|---|"]
    for name, values in results.items():
        walls, cpus = [t.wall for t in values], [t.cpu for t in values]
        rows = args.rows * (2 if name == "compare" else 1)
        lines.append(f"| `tailrace {name}` | {statistics.median(walls):.1f} | {min(walls):.1f}–{max(walls):.1f} | "
                     f"{statistics.median(cpus):.1f} ({min(cpus):.1f}–{max(cpus):.1f}) | "
                     f"{rows / statistics.median(walls):,.0f} | {max(t.peak for t in values):.2f} GiB |")
    analyze = [t.wall for t in results["analyze"]]
    rate = args.rows / statistics.median(analyze)
    memory = max(t.peak for t in results["analyze"])
    if args.rows >= 100_000_000:
        seconds = statistics.median(analyze)
        lines += ["", f"Targets: `analyze` < 60 s — {'met' if seconds < 60 else 'not met'} ({seconds:.0f} s); "
                      f"< 2 GiB — {'met' if memory < 2 else 'not met'} ({memory:.2f} GiB)."]
    else:
        lines += ["", "Targets: `analyze` ≥ 3,000,000 rows/s — "
                      f"{'met' if rate >= 3e6 else 'not met'} ({rate:,.0f}); `analyze` < 1 GiB — "
                      f"{'met' if memory < 1 else 'not met'} ({memory:.2f} GiB)."]
    if "compare" in results:
        compare = [t.wall for t in results["compare"]]
        compare_memory = max(t.peak for t in results["compare"])
        met = max(compare) < 120 and compare_memory < 8
        lines[-1] += (f" `compare` < 120 s and < 8 GiB — {'met' if met else 'not met'}"
                      f" ({max(compare):.0f} s, {compare_memory:.2f} GiB).")
    if baseline:
        ratios = [new.wall / old.wall for new, old in zip(results["analyze"], baseline)]
        cpu_ratios = [new.cpu / old.cpu for new, old in zip(results["analyze"], baseline)]
        lines += ["", "Side by side with `--baseline DIR` (a checkout of the tree before the change), alternated on "
                      "the same run directory: that tree's "
                      f"`analyze` took {statistics.median(t.wall for t in baseline):.1f} s median "
                      f"({min(t.wall for t in baseline):.1f}–{max(t.wall for t in baseline):.1f} s, "
                      f"{statistics.median(t.cpu for t in baseline):.1f} CPU-s, peak "
                      f"{max(t.peak for t in baseline):.2f} GiB); this tree's time over that one's, per repeat: "
                      + ", ".join(f"{x:.2f}" for x in ratios) + f" (median {statistics.median(ratios):.2f}); its CPU "
                      "time over that one's: " + ", ".join(f"{x:.2f}" for x in cpu_ratios)
                      + f" (median {statistics.median(cpu_ratios):.2f})."]
        lines[-1] += (" summary.json: the same as that tree's, every field, in every repeat." if not differ else
                      f" summary.json DIFFERS from that tree's at {len(differ)} field(s): {', '.join(differ[:8])}.")
    title = f"Analysis at scale: {args.rows:,} rows" + (f" in {chunk_count:,} chunks" if args.chunks != Shape.chunks else "") \
        + (f", kept columns within {args.keep_mib:,} MiB" if args.keep_mib else "")
    write_section(title, "\n".join(lines))
    print("\n".join(lines))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
