"""Benchmark: how soon a run's report follows its load — `tailrace run PROFILE`, this tree beside another revision.

Each measured run is the real command (`python -m tailrace.cli run PROFILE --quiet`) from the tree's own checkout
(bench/run_start.py's trees; the models built once, shared). From the run's master-events.jsonl: the last worker's
`worker_done` (its load over) to `run_ended` (the report written, the verdict known) — the time a user waits for
the report — and the whole command's wall time. Runs alternate between the trees, so that machine noise falls on
both alike.

    .venv/bin/python bench/run_to_report.py --baseline-rev REV [--profile profiles/demo.toml] [--rounds 3]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import shown_command, write_section  # noqa: E402
from bench.run_start import tree_of, working_tree  # noqa: E402


def run_once(tree: Path, profile: Path, out: Path) -> tuple[float, float]:
    """(load over → report written, whole command) in seconds, of one `tailrace run` from `tree`."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    began = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(profile), "--out", str(out), "--quiet"],
                       cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True,
                       timeout=900)
    wall = time.monotonic() - began
    made = set(out.iterdir()) - before
    if r.returncode not in (0, 1, 3) or len(made) != 1:
        raise SystemExit(f"{tree.name}: tailrace run exited {r.returncode}: {(r.stdout + r.stderr).strip()[-1500:]}")
    (run_dir,) = made
    events = [json.loads(line) for line in (run_dir / "master-events.jsonl").read_text().splitlines() if line]
    done = max(e["t_ns"] for e in events if e["event"] == "worker_done")
    ended = [e["t_ns"] for e in events if e["event"] == "run_ended"]
    if not ended:
        raise SystemExit(f"{tree.name}: run {run_dir.name} has no run_ended event")
    return (ended[0] - done) / 1e9, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-rev", required=True, help="the revision to measure beside the working tree")
    ap.add_argument("--profile", type=Path, default=Path("profiles/demo.toml"))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    profile = (ROOT / args.profile).resolve()
    with tempfile.TemporaryDirectory(prefix="tailrace-run-to-report-") as tmp:
        work = Path(tmp)
        trees = {"before": tree_of(args.baseline_rev, work), "this tree": working_tree(work)}
        for tree in trees.values():
            (tree / "build").symlink_to(ROOT / "build")  # the profile's models and data, built once
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
        try:
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    times[name].append(run_once(tree, profile, work / "runs" / name.replace(" ", "-")))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees["before"])],
                           check=False)
    rows = []
    for name, v in times.items():
        tail, wall = [t for t, _ in v], [w for _, w in v]
        rows.append(f"| {name} | {len(v)} | {statistics.median(tail):.2f} | {min(tail):.2f}–{max(tail):.2f} | "
                    f"{statistics.median(wall):.1f} | {min(wall):.1f}–{max(wall):.1f} |")
    ratios = [a[0] / b[0] for a, b in zip(times["this tree"], times["before"])]
    argv = ["REV" if a == args.baseline_rev else a for a in sys.argv[1:]]
    body = (f"Command: `{shown_command('bench/run_to_report.py', argv)}` (`tailrace run {args.profile}`, the trees "
            "alternating; the load over — the last worker's worker_done — to the report written — run_ended).\n\n"
            "| tree | runs | load over → report s (median) | spread | whole command s (median) | spread |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows) +
            f"\n\nThis tree's wait over the tree before's, run by run: {', '.join(f'{r:.2f}' for r in ratios)}.")
    print(body)
    write_section(f"A run's report after its load: {args.profile.name}", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
