"""Benchmark: the embedded server's scheduler cost per request, without HTTP or a model.

A single-slot compute-only model runs inline (the path HTTP's batch-1 requests take): `ModelScheduler.infer_async`
awaited back to back on one event loop, answering at once, so what is timed is admission, the slot, the in-flight
count, the statistics and the stage timings. `--baseline DIR` times another tree's scheduler the same way, each
tree in its own process, alternated, so a change to the scheduler is measured side by side (the HTTP benchmark,
bench/endpoint_http.py, varies ±30% a round on this VM: too much to see a few microseconds).

    .venv/bin/python bench/scheduler_overhead.py [--rounds 5] [--requests 50000] [--baseline DIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import write_section  # noqa: E402

COMMAND = ".venv/bin/python bench/scheduler_overhead.py"
# run in the tree's own directory (`python -c` imports the packages of its cwd): either room layout
PROBE = """
import asyncio, json, sys, time
import numpy as np
try:
    from tailrace.endpoints.serving.scheduler import ModelScheduler, Timings
except ImportError:  # trees before endpoints/ had rooms
    from tailrace.endpoints.scheduler import ModelScheduler, Timings

class Echo:
    compute_only = True
    def run(self, inputs, started_ns=None):
        return {"y": inputs["x"]}

n = int(sys.argv[1])
scheduler = ModelScheduler("m", Echo(), slots=1, queue_depth=64)
x = {"x": np.ones((1, 4))}

async def main():
    for _ in range(2000):
        await scheduler.infer_async(x, Timings())
    started = time.perf_counter()
    for _ in range(n):
        await scheduler.infer_async(x, Timings())
    return (time.perf_counter() - started) / n * 1e6

print(json.dumps(asyncio.run(main())))
"""


def time_tree(tree: Path, requests: int) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE, str(requests)], cwd=tree, capture_output=True, text=True,
                         check=True).stdout
    return float(json.loads(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent.parent
    ours, theirs = [], []
    for _ in range(args.rounds):
        if args.baseline is not None:
            theirs.append(time_tree(args.baseline.resolve(), args.requests))
        ours.append(time_tree(here, args.requests))
    lines = [f"Command: `{COMMAND} --rounds {args.rounds} --requests {args.requests}"
             + (" --baseline DIR`" if args.baseline else "`"), "",
             f"This tree: {statistics.median(ours):.2f} µs a request (median of {args.rounds} rounds of "
             f"{args.requests:,}; {min(ours):.2f}–{max(ours):.2f})."]
    if theirs:
        ratios = [a / b for a, b in zip(ours, theirs)]
        lines.append("Baseline (`DIR`: a checkout of the tree before the change), alternated: {statistics.median(theirs):.2f} µs "
                     f"({min(theirs):.2f}–{max(theirs):.2f}); this / baseline per round: "
                     + ", ".join(f"{r:.2f}" for r in ratios) + f" (median {statistics.median(ratios):.2f}).")
    body = "\n".join(lines) + "\n"
    print(body)
    if not args.no_write:
        write_section("Embedded endpoint: scheduler cost per request", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
