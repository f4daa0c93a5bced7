"""Benchmark: what a small run costs around its load — start-up and end — this tree beside another revision.

Each measured run is `tailrace run`'s LocalRun in-process (as the tests run it): the embedded endpoint, two regions
with their delay proxies, one worker each, 150 requests/s for 1 s of warm-up and 3 s measured. Its time from start
to end, less the 4 s of load, is the overhead. The first run of each batch is not counted (it pays the imports).
Batches alternate between the trees, so that machine noise falls on both alike; each tree runs from its own
checkout (`git worktree`, its rooms on PYTHONPATH as `tailrace.<room>`).

    .venv/bin/python bench/run_start.py --baseline-rev REV [--rounds 3] [--runs 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import ROOMS, link_rooms  # noqa: E402

LOAD_S = 4.0


def measure(runs: int, models: Path, out: Path) -> list[float]:
    """In the tree on sys.path[0]: `runs` + 1 runs, the seconds of each after the first."""
    from tailrace.harness.orchestration.local_run import LocalRun
    from tests.support import make_profile

    profile = make_profile(models, load={"rate": 150, "duration_s": LOAD_S - 1, "warmup_s": 1, "seed": 42})
    times = []
    for i in range(runs + 1):
        t0 = time.monotonic()
        run = LocalRun(profile, out, quiet=True)
        try:
            run.start()
            run.wait(lambda _r: None)
        finally:
            run.stop()
        manifest = run.manifest(False)
        if not manifest["valid"]:
            raise SystemExit(f"run {run.run_id} INVALID: {manifest['invalid_reasons']}")
        if i:
            times.append(time.monotonic() - t0)
    return times


def tree_of(rev: str, work: Path) -> Path:
    """A checkout of `rev` whose rooms import as tailrace.<room> from PYTHONPATH."""
    tree = work / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "-f", str(tree), rev], check=True)
    return link_rooms(tree)


def working_tree(work: Path) -> Path:
    tree = work / "working"
    tree.mkdir()
    for name in (*ROOMS, "tailrace", "tests", "deploy", "profiles"):
        shutil.copytree(ROOT / name, tree / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    return link_rooms(tree)


def batch(tree: Path, runs: int, models: Path, out: Path) -> list[float]:
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", str(runs), "--models", str(models),
                        "--out", str(out)], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{tree.name}: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-rev", help="the revision to measure beside the working tree")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3, help="measured runs per batch")
    ap.add_argument("--measure", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--models", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(measure(args.measure, args.models, args.out)))
        return 0
    if not args.baseline_rev:
        ap.error("--baseline-rev is required")
    with tempfile.TemporaryDirectory(prefix="tailrace-run-start-") as tmp:
        work = Path(tmp)
        sys.path.insert(0, str(ROOT))
        from tailrace.endpoints.models.model_build import build_repository

        build_repository(work / "models")
        trees = {args.baseline_rev: tree_of(args.baseline_rev, work), "working tree": working_tree(work)}
        times: dict[str, list[float]] = {name: [] for name in trees}
        try:
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    times[name] += batch(tree, args.runs, work / "models", work / "runs")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(trees[args.baseline_rev])], check=False)
    shown = {args.baseline_rev: "the tree before (REV)", "working tree": "this tree"}  # (no commit in the docs)
    rows = [f"| {shown[name]} | {len(v)} | {statistics.median(v):.2f} | {min(v):.2f}–{max(v):.2f} | "
            f"{statistics.median(v) - LOAD_S:.2f} |" for name, v in times.items()]
    argv = ["REV" if a == args.baseline_rev else a for a in sys.argv[1:]]
    body = (f"`{' '.join(['.venv/bin/python', 'bench/run_start.py', *argv])}`: a two-region run on the "
            f"embedded endpoint, {LOAD_S:g} s of load, from start to end (median of the runs; the overhead is that "
            "less the load), this tree beside another, batches alternating.\n\n"
            "| tree | runs | median s | min–max s | overhead s |\n|---|---|---|---|---|\n" + "\n".join(rows))
    print(body)
    sys.path.insert(0, str(ROOT))
    from bench.common import write_section

    write_section("A run's start and end", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
