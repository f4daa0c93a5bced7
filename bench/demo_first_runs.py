"""How often does a newcomer's `make demo` PASS? Runs it as a newcomer would: `--fresh N` fresh clones of this
repository's HEAD, each running `make demo` once (a new virtualenv, the models just built, every cache cold: the case
that failed), then `--repeats M` more runs in the last clone. Each run's verdict, every SLO that was not PASS (with
its measured value and why), every trend found (settled, drift or backlog, and whether it changed a verdict), the
exit code and the wall time go to `--out` (JSON) and a table on stdout.

    python bench/demo_first_runs.py --fresh 5 --repeats 15 --out build/bench/demo_first_runs.json
    python bench/demo_first_runs.py --from-json build/bench/demo_first_runs.json   # the section again, from a run

It writes its section of docs/BENCHMARKS.md ("A newcomer's make demo").
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import write_section  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MAKE_TIMEOUT_S = 1800  # a fresh clone installs its virtualenv first (pip's cache is shared)


def run_demo(clone: Path, fresh: bool) -> dict:
    """`make demo` in `clone`: its exit code, wall time, closing line, and the verdicts of its run's summary."""
    started = time.monotonic()
    done = subprocess.run(["make", "demo"], cwd=clone, capture_output=True, text=True, timeout=MAKE_TIMEOUT_S)
    wall_s = time.monotonic() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("demo: ")]
    runs = sorted((clone / "build" / "runs").glob("demo-*/report/summary.json"), key=lambda p: p.stat().st_mtime)
    out = {"fresh_clone": fresh, "exit_code": done.returncode, "wall_s": round(wall_s, 1),
           "closing_line": lines[-1] if lines else None, "verdict": None, "not_pass": [], "trends": []}
    if not runs:
        out["stderr_tail"] = done.stderr[-2000:]
        return out
    summary = json.loads(runs[-1].read_text())
    out["verdict"], out["run"] = summary["verdict"], summary["run_id"]
    for v in summary.get("slos", []):
        where = f"{v['description']} · {v['endpoint']} · {v['region']}"
        if v["verdict"] != "PASS":
            out["not_pass"].append({"slo": where, "verdict": v["verdict"], "measured": v.get("measured"),
                                    "reason": v.get("reason")})
        if v.get("trend"):
            out["trends"].append({"slo": where, "trend": v["trend"], "kind": v.get("trend_kind"),
                                  "changed_verdict": v.get("trend_changed_verdict"), "reason": v.get("reason")})
    return out


def clone(into: Path) -> Path:
    subprocess.run(["git", "clone", "--quiet", "--no-local", str(REPO), str(into)], check=True)
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", type=int, default=5, help="fresh clones, one `make demo` each")
    parser.add_argument("--repeats", type=int, default=15, help="more runs in the last fresh clone")
    parser.add_argument("--work", type=Path, default=Path("/tmp/tailrace-demo-bench"), help="where the clones go")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "bench" / "demo_first_runs.json")
    parser.add_argument("--from-json", type=Path, default=None, help="write the section from a run's results")
    args = parser.parse_args()
    if args.from_json is not None:
        report(json.loads(args.from_json.read_text()))
        return 0
    if args.fresh < 1:
        print("demo_first_runs: --fresh must be at least 1", file=sys.stderr)
        return 2
    subprocess.run(["rm", "-rf", str(args.work)], check=True)
    args.work.mkdir(parents=True)
    results = []
    last = None
    for i in range(args.fresh):
        last = clone(args.work / f"clone-{i}")
        results.append(run_demo(last, fresh=True))
        print(json.dumps(results[-1]), flush=True)
        if i < args.fresh - 1:
            subprocess.run(["rm", "-rf", str(last / ".venv")], check=True)  # the disk: one virtualenv at a time
    for _ in range(args.repeats):
        results.append(run_demo(last, fresh=False))
        print(json.dumps(results[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    report(results)
    return 0


def report(results: list[dict]) -> None:
    """The summary line and a line a run, on stdout and as docs/BENCHMARKS.md's section."""
    fresh = [r for r in results if r["fresh_clone"]]
    passed = sum(r["verdict"] == "PASS" for r in results)
    zero = sum(r["exit_code"] == 0 for r in results)
    fresh_pass = sum(r["verdict"] == "PASS" for r in fresh)
    trends = [t for r in results for t in r["trends"]]
    walls = sorted(r["wall_s"] for r in results if not r["fresh_clone"]) or [0.0]
    lines = [f"Command: `.venv/bin/python bench/demo_first_runs.py --fresh {len(fresh)} --repeats "
             f"{len(results) - len(fresh)}` (each fresh clone of HEAD runs `make demo` once: a new virtualenv, the "
             "models just built; then the repeats in the last clone).", "",
             f"**{passed} of {len(results)} runs PASS** ({fresh_pass} of {len(fresh)} first runs of a fresh clone); "
             f"`make demo` exited 0 in {zero} of {len(results)}; trends found: {len(trends)} "
             f"({sum(bool(t['changed_verdict']) for t in trends)} changed a verdict). A repeat took "
             f"{walls[0]:.0f}–{walls[-1]:.0f} s (median {walls[len(walls) // 2]:.0f} s), a fresh clone's first with "
             "its install.", "", "| run | verdict | exit | wall s | not PASS (why) | trends |", "|---|---|---|---|---|---|"]
    for i, r in enumerate(results, 1):
        bad = "; ".join(f"{n['slo']}: {n['verdict']}" + (f" ({n['reason']})" if n["reason"] else "")
                        for n in r["not_pass"])[:240] or "–"
        found = "; ".join(f"{t['slo']}: {t['trend']} {t['kind']}" for t in r["trends"])[:160] or "–"
        lines.append(f"| {i} {'fresh' if r['fresh_clone'] else 'again'} | {r['verdict'] or 'no run'} | "
                     f"{r['exit_code']} | {r['wall_s']:.0f} | {bad} | {found} |")
    text = "\n".join(lines)
    print(text)
    write_section("A newcomer's make demo", text)


if __name__ == "__main__":
    sys.exit(main())
