"""A real trace's bursts of long prompts, on time? The Mooncake conversation trace (profiles/traces: rows due at the
same millisecond, prompts of 0.9k–121k tokens built from their 512-token blocks) replayed for a 120 s window at
`time_scale` 2 against the embedded `synthetic_lm` (openai-completions), through `tailrace run`: one region's worker
(`--regions 2`: two, each sending its share of every burst) with the Locust processes on CPU 0, and the endpoint
and this process on CPU 1 (docs/DEPLOY.md: a worker's core is its own; `--no-pin`: wherever
the kernel puts them). Each repeat runs this tree, then (with `--baseline DIR`, a checkout of another commit with its
own `.venv`) that tree, on the same profile.

Reports per tree and window: send lag p99 over all rows, the worst row of the run's first burst (the rows due at the
window's first instant), the worst row of the later bursts (two or more rows due at one instant), rows sent / due,
and the workers' peak resident memory (sampled every second).

    python bench/trace_bursts.py [--windows 0,1320] [--repeats 3] [--regions 1] [--no-pin] [--baseline DIR]
                                 [--keep DIR] [--write]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import write_section  # noqa: E402

TRACE = ROOT / "profiles" / "traces" / "mooncake-conversation.jsonl.gz"
WINDOW_S, TIME_SCALE = 120, 2


def profile(start_s: int, out: Path, regions: int = 1, pin: bool = True) -> str:
    region_tables = "".join(f'[[regions]]\nname = "region-{k}"\nshare = {1 / regions}\n' for k in range(regions))
    return f"""name = "trace-bursts"
output_dir = "{out}"
[[endpoints]]
name = "llm"
url = "embedded"
protocol = "openai-completions"
model = "synthetic_lm"
timeout_ms = 120000
{region_tables}[load]
duration_s = {WINDOW_S // TIME_SCALE}
warmup_s = 0
seed = 7
[load.arrivals]
process = "trace"
trace = {{ file = "{TRACE}", start_s = {start_s}, window_s = {WINDOW_S}, time_scale = {TIME_SCALE} }}
{"[generator]" + chr(10) + "cpus = [0]" if pin else ""}
[embedded]
{"cpus = [1]" if pin else ""}
max_num_seqs = {{ synthetic_lm = 256 }}
max_model_len = {{ synthetic_lm = 131072 }}
kv_cache_tokens = {{ synthetic_lm = 4194304 }}
"""


def workers_rss_mb(parent: psutil.Process, known: dict[int, bool]) -> float:
    """The Locust workers' resident memory, summed (MB). A process's command line is read once (`known`): reading it
    takes the process's memory-map lock, which held a worker's munmap of a sent body ~10 ms once a second."""
    total = 0.0
    for child in parent.children(recursive=True):
        try:
            if child.pid not in known:
                line = " ".join(child.cmdline())
                known[child.pid] = "locust" in line and "--worker" in line
            if known[child.pid]:
                total += child.memory_info().rss / 2**20
        except psutil.Error:
            continue
    return total


def run_once(tree: Path, start_s: int, work: Path, regions: int, pin: bool) -> dict:
    """One `tailrace run` of the window with `tree`'s own CLI; the rows' send lags by burst."""
    out = work / "runs"
    toml = work / "p.toml"
    toml.write_text(profile(start_s, out, regions, pin))
    run = subprocess.Popen([str(tree / ".venv" / "bin" / "tailrace"), "run", str(toml), "--quiet"], cwd=tree,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           preexec_fn=lambda: os.sched_setaffinity(0, range(os.cpu_count())))  # (not this one's)
    parent, peak, known = psutil.Process(run.pid), 0.0, {}
    while run.poll() is None:
        peak = max(peak, workers_rss_mb(parent, known))
        time.sleep(1)
    output = run.stdout.read()
    runs = sorted(out.glob("trace-bursts-*"))
    if not runs:
        raise SystemExit(f"{tree}: the run left no run directory:\n{output[-3000:]}")
    import pandas as pd

    from tailrace.harness.workload.traces import read_trace

    df = pd.concat([pd.read_parquet(p, columns=["sample_index", "send_lag_ns", "status", "prompt_tokens_sent"])
                    for p in runs[-1].glob("regions/*/*/requests-*.parquet")])
    trace = read_trace(TRACE)
    t = trace.time_s
    due = int(((t >= start_s) & (t < start_s + WINDOW_S)).sum())
    at = t[df["sample_index"].to_numpy()]
    lag = df["send_lag_ns"].to_numpy() / 1e6
    instants, counts = np.unique(at, return_counts=True)
    in_burst = np.isin(at, instants[counts >= 2])
    first = at == instants[0]
    return {"p99": float(np.percentile(lag, 99)), "first": float(lag[first].max()), "first_rows": int(first.sum()),
            "later": float(lag[in_burst & ~first].max()), "max": float(lag.max()), "sent": len(df), "due": due,
            "ok": int((df["status"] == "ok").sum()), "rss": peak}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", default="0,1320", help="the windows' starts in the trace's own time (s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--regions", type=int, default=1, help="regions, one worker each")
    ap.add_argument("--no-pin", action="store_true", help="leave the processes unpinned")
    ap.add_argument("--keep", type=Path, default=None, help="keep each tree's and window's last run directory here")
    ap.add_argument("--baseline", type=Path, default=None, help="a checkout of another commit, with its .venv")
    ap.add_argument("--write", action="store_true", help="write the result into docs/BENCHMARKS.md")
    args = ap.parse_args()
    if args.baseline is not None and not (args.baseline / ".venv" / "bin" / "tailrace").exists():
        ap.error(f"--baseline {args.baseline}: no .venv/bin/tailrace there")
    if not args.no_pin:
        os.sched_setaffinity(0, {1})  # this process's sampling too stays off the worker's core
    trees = [("this tree", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline is not None else [])
    windows = [int(w) for w in args.windows.split(",")]
    results: dict[tuple[str, int], list[dict]] = {}
    for repeat in range(args.repeats):
        for start_s in windows:
            for name, tree in trees:  # alternated: both trees see the same hour of machine noise
                with tempfile.TemporaryDirectory(prefix="trace-bursts-") as tmp:
                    r = run_once(tree, start_s, Path(tmp), args.regions, not args.no_pin)
                    if args.keep is not None:  # the last repeat's run directories, for a closer look
                        kept = args.keep / f"{name.replace(' ', '-')}-{start_s}"
                        shutil.rmtree(kept, ignore_errors=True)
                        shutil.copytree(next((Path(tmp) / "runs").glob("trace-bursts-*")), kept)
                results.setdefault((name, start_s), []).append(r)
                print(f"repeat {repeat + 1} window {start_s} s {name}: {r}", flush=True)
    base = " --baseline DIR" if args.baseline is not None else ""  # (no machine path in the docs)
    flags = f" --regions {args.regions}" + (" --no-pin" if args.no_pin else "")
    setting = (f"{args.regions} region(s), one worker each, " +
               ("the Locust processes and the embedded synthetic_lm on whichever of the 2 cores" if args.no_pin else
                "the Locust processes on CPU 0, the embedded synthetic_lm on CPU 1"))
    lines = [f"Command: `python bench/trace_bursts.py --windows {args.windows} --repeats {args.repeats}{flags}{base}` "
             f"(each window {WINDOW_S} s of the trace at time_scale {TIME_SCALE}; {setting}; median (min–max) over "
             "the repeats)", "",
             "| tree | window | rows sent / due | send lag p99, all rows (ms) | first burst: its latest row (ms) | "
             "later bursts: their latest row (ms) | workers' peak RSS (MB, both) |", "|---|---|---|---|---|---|---|"]
    for (name, start_s), rs in results.items():
        label = name if name == "this tree" else "the tree before (DIR)"
        lines.append(f"| {label} | {start_s}–{start_s + WINDOW_S} s ({rs[0]['first_rows']} rows at 0 s) | "
                     f"{rs[0]['sent']} / {rs[0]['due']} | {spread([r['p99'] for r in rs])} | "
                     f"{spread([r['first'] for r in rs])} | {spread([r['later'] for r in rs])} | "
                     f"{statistics.median(r['rss'] for r in rs):.0f} |")
    body = "\n".join(lines) + "\n"
    print(body)
    if args.write:
        write_section("A real trace's bursts of long prompts", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
