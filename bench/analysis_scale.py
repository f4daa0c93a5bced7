"""Benchmark: `tailrace analyze` and `tailrace compare` on large synthetic run directories (bench/synthetic_run.py:
3 regions × 2 workers, 3 endpoints, errors, clock samples, a warm-up and a rate step).

Each command runs as its own process, timed end to end (imports, reading, statistics, the report with its
plots) with its peak RSS from the kernel (wait4). The run directories are written once under --work and reused.
Targets (issue: analysis at scale): analyze 10 M rows at ≥ 1,000,000 rows/s in < 4 GiB; compare two 10 M-row
runs in < 2 min and < 8 GiB.

    .venv/bin/python bench/analysis_scale.py [--rows 10000000] [--repeats 3] [--work /var/tmp/tailrace-scale]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import write_section  # noqa: E402
from bench.synthetic_run import Shape, write_synthetic_run  # noqa: E402

COMMAND = ".venv/bin/python bench/analysis_scale.py"
TAILRACE = [sys.executable, "-m", "tailrace.cli"]


def timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall s, peak RSS GiB, exit code) of one process."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1, 3, 4):  # a verdict; anything else is the command failing
        raise SystemExit(f"{' '.join(argv)} exited with {code}: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 2**20, code


def run_dir(work: Path, rows: int, seed: int) -> Path:
    path = work / f"synthetic-{rows}-seed{seed}"
    if not (path / "manifest.json").exists():
        print(f"writing {rows:,} rows → {path}", flush=True)
        write_synthetic_run(path, Shape(rows, seed=seed))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/tailrace-scale"))
    args = ap.parse_args()
    a, b = run_dir(args.work, args.rows, 1), run_dir(args.work, args.rows, 2)
    size = sum(p.stat().st_size for p in a.rglob("*.parquet")) / 2**20
    results: dict[str, list[tuple[float, float, int]]] = {"analyze": [], "compare": []}
    with tempfile.TemporaryDirectory(prefix="tailrace-scale-") as tmp:
        for r in range(args.repeats):
            results["analyze"].append(timed([*TAILRACE, "analyze", str(a), "--quiet", "--out", f"{tmp}/report-{r}"]))
            results["compare"].append(timed([*TAILRACE, "compare", str(a), str(b)]))
            print(" | ".join(f"{k}: {v[-1][0]:.1f} s, {v[-1][1]:.2f} GiB" for k, v in results.items()), flush=True)
    lines = [f"Command: `{COMMAND} --rows {args.rows} --repeats {args.repeats}` (run directories of {args.rows:,} "
             f"rows each: {size:,.0f} MiB of Parquet chunks, 204 chunks, 6 workers in 3 regions, 3 endpoints).", "",
             "| command | wall s (median) | spread over repeats | rows/s (median) | peak RSS (max) |", "|---|---|---|---|---|"]
    for name, values in results.items():
        walls = [w for w, _, _ in values]
        rows = args.rows * (2 if name == "compare" else 1)
        lines.append(f"| `tailrace {name}` | {statistics.median(walls):.1f} | {min(walls):.1f}–{max(walls):.1f} | "
                     f"{rows / statistics.median(walls):,.0f} | {max(m for _, m, _ in values):.2f} GiB |")
    analyze, compare = ([w for w, _, _ in results[k]] for k in ("analyze", "compare"))
    rate = args.rows / statistics.median(analyze)
    memory = max(m for _, m, _ in results["analyze"])
    compare_memory = max(m for _, m, _ in results["compare"])
    lines += ["", "Targets: `analyze` ≥ 1,000,000 rows/s — "
                  f"{'met' if rate >= 1e6 else 'not met'} ({rate:,.0f}); `analyze` < 4 GiB — "
                  f"{'met' if memory < 4 else 'not met'} ({memory:.2f} GiB); `compare` < 120 s and < 8 GiB — "
                  f"{'met' if max(compare) < 120 and compare_memory < 8 else 'not met'} "
                  f"({max(compare):.0f} s, {compare_memory:.2f} GiB)."]
    write_section(f"Analysis at scale: {args.rows:,} rows", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
