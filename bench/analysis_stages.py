"""Benchmark: where `tailrace analyze`'s time goes, stage by stage, on a synthetic run directory
(bench/analysis_scale.py writes it).

Each repeat is a fresh process that imports the analysis and runs `analyze_and_report` as `tailrace analyze` does,
with each statistic of analysis/analyze.py (and the report) timed: when it starts, how long it takes, and how busy
the machine's CPUs were meanwhile (from /proc/stat; 200 % is both cores of this machine), the process's peak and
current resident size at its end, and the system CPU time and page faults the process took meanwhile (every
thread's: the kernel's share, faulting in and zeroing fresh pages). A stage at ~100 % ran on one core while the
other idled; the read-ahead and the latency table's threads show as more. The stage at whose end the peak first
reaches its final value set it (a long run's statistics run one at a time, so each peak is its own; where the log
fits, stages beside each other share it).

    .venv/bin/python bench/analysis_stages.py [--rows 10000000] [--repeats 3] [--work /var/tmp/tailrace-scale]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import write_section  # noqa: E402

COMMAND = ".venv/bin/python bench/analysis_stages.py"
# analysis/analyze.py's statistics in the order it computes them, and the report (analysis/analyze_command.py)
STAGES = ("load_run", "arrival_checks_by_column", "scenario_summary", "largest_positions", "decomposition_table",
          "queueing_table", "variant_decision", "cold_start_table", "per_phase_table", "endpoint_region_positions",
          "request_count_table", "latency_table", "region_cdfs", "add_goodput", "groups_of", "evaluate_slos",
          "validity_rows", "outage_windows", "timeline", "_slowest", "_error_table", "TimeOrder")


def _cpu() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def _memory_gib() -> tuple[float, float]:
    """(this process's peak resident size so far, its resident size now), GiB."""
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak_kib / 2**20, resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**30


def _child(run_dir: Path, out: Path) -> None:
    """One timed analysis; prints its stages as JSON: [(name, start s, seconds, CPU busy %, peak GiB after, resident
    GiB after, the process's system CPU seconds, its page faults in millions)] and the total."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as tailrace/cli.py sets it
    t0 = time.perf_counter()
    import tailrace.analysis.analyze_command as report_cli
    from tailrace.analysis.read import process_memory
    from tailrace.analysis.report.figures import start_figures

    process_memory.settle()  # first, before any thread starts, as analyze_and_report does for tailrace analyze
    figures = start_figures()  # then the figure process, as analyze_and_report starts it
    import tailrace.analysis.analyze as analyze
    marks = []

    def timed(module, name: str) -> None:
        inner = getattr(module, name)

        @functools.wraps(inner)
        def wrapper(*args, **kwargs):
            start, cpu, usage = time.perf_counter(), _cpu(), resource.getrusage(resource.RUSAGE_SELF)
            try:
                return inner(*args, **kwargs)
            finally:
                busy, total = (b - a for a, b in zip(cpu, _cpu()))
                after = resource.getrusage(resource.RUSAGE_SELF)
                marks.append((name, start - t0, time.perf_counter() - start, 100 * (os.cpu_count() or 1)
                              * busy / max(total, 1), *_memory_gib(), after.ru_stime - usage.ru_stime,
                              (after.ru_minflt - usage.ru_minflt) / 1e6))
        setattr(module, name, wrapper)

    imported = time.perf_counter() - t0
    for name in STAGES:
        timed(analyze, name)
    timed(report_cli, "write_outputs")
    reads = _count_column_reads()
    report_cli.analyze_and_report(run_dir, out, quiet=True, exits=True, figures=figures)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"imports": imported, "total": time.perf_counter() - t0, "stages": marks, "reads": reads,
                      "system_s": usage.ru_stime, "faults_m": usage.ru_minflt / 1e6}))


def _count_column_reads() -> dict[str, float]:
    """Totals, filled in as the analysis goes, of its passes over the chunks (ChunkColumns._read_now, whichever
    stage or the read-ahead asks): how many, their seconds, and the process's system CPU and page faults (millions)
    meanwhile."""
    from tailrace.analysis.read import chunks

    totals = {"passes": 0, "seconds": 0.0, "system_s": 0.0, "faults_m": 0.0}
    inner = chunks.ChunkColumns._read_now

    @functools.wraps(inner)
    def counted(self, names, *args, **kwargs):
        if all(n in self._values for n in names):  # loaded already: no pass
            return inner(self, names, *args, **kwargs)
        start, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        try:
            return inner(self, names, *args, **kwargs)
        finally:
            after = resource.getrusage(resource.RUSAGE_SELF)
            totals["passes"] += 1
            totals["seconds"] += time.perf_counter() - start
            totals["system_s"] += after.ru_stime - usage.ru_stime
            totals["faults_m"] += (after.ru_minflt - usage.ru_minflt) / 1e6
    chunks.ChunkColumns._read_now = counted
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/tailrace-scale"))
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        _child(args.child, Path(tempfile.mkdtemp(prefix="tailrace-stages-")))
        return 0
    run_dir = args.work / f"synthetic-{args.rows}-seed1"
    if not (run_dir / "manifest.json").exists():
        ap.error(f"{run_dir}: no run directory; write it with bench/analysis_scale.py --rows {args.rows}")
    runs = []
    for _ in range(args.repeats):
        done = subprocess.run([sys.executable, __file__, "--child", str(run_dir)], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent.parent)
        if done.returncode != 0:
            raise SystemExit(f"the timed analysis failed: {done.stderr[-2000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"total {runs[-1]['total']:.1f} s", flush=True)
    # stages by name (the n-th time a name was timed), not by position: the side thread's stages end in an order
    # that differs between repeats
    def by_name(run: dict) -> dict[tuple[str, int], list]:
        seen: dict[str, int] = {}
        out = {}
        for stage in run["stages"]:
            seen[stage[0]] = seen.get(stage[0], 0) + 1
            out[(stage[0], seen[stage[0]])] = stage
        return out

    timed_runs = [by_name(r) for r in runs]
    keys = sorted((key for key in timed_runs[0] if all(key in t for t in timed_runs)),
                  key=lambda key: statistics.median(t[key][1] for t in timed_runs))
    lines = [f"Command: `{COMMAND} --rows {args.rows} --repeats {args.repeats}` (one process per repeat; medians, "
             f"spread in brackets; CPU busy of 100 × {os.cpu_count()} %).", "",
             "| stage | starts at s | takes s | CPU busy meanwhile | peak RSS at its end, GiB | RSS at its end, GiB | "
             "system CPU s | page faults, millions |", "|---|---|---|---|---|---|---|---|"]

    def cell(values: list[float], digits: int = 2) -> str:
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"

    lines.append(f"| imports (analysis, report) | 0 | {cell([r['imports'] for r in runs])} | | | | | |")
    for key in keys:
        column = [t[key] for t in timed_runs]
        lines.append(f"| {key[0]} | {cell([c[1] for c in column])} | {cell([c[2] for c in column])} | "
                     f"{statistics.median(c[3] for c in column):.0f} % | {cell([c[4] for c in column])} | "
                     f"{cell([c[5] for c in column])} | {cell([c[6] for c in column])} | {cell([c[7] for c in column])} |")
    lines.append(f"| whole run (in process, after the interpreter starts) | | {cell([r['total'] for r in runs], 1)} | | | | "
                 f"{cell([r['system_s'] for r in runs])} | {cell([r['faults_m'] for r in runs])} |")
    reads = [r["reads"] for r in runs]
    lines.append(f"| passes over the chunks (within the stages above: {cell([x['passes'] for x in reads], 0)}) | | "
                 f"{cell([x['seconds'] for x in reads])} | | | | {cell([x['system_s'] for x in reads])} | "
                 f"{cell([x['faults_m'] for x in reads])} |")
    write_section(f"Analysis at scale: where the time goes ({args.rows:,} rows)", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
