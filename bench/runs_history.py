"""Benchmark: `tailrace runs` over a directory of N analysed runs — cold (an empty catalogue: every summary.json
read, then catalogued) against warm (the catalogue's lines, each summary only stat'ed) — and `tailrace runs trend`
(each of the profile's summaries read), each a fresh `tailrace` process, `--repeats` times; the spread shown.

The runs are copies of the saved demo run's summary (tests/data/saved_runs/demo.summary.json, ~60 kB), each with its
own id, start and p99, in their own run directories (manifest.json + report/summary.json).

    .venv/bin/python bench/runs_history.py [--runs 1000] [--repeats 3]
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
from bench.common import shown_command, write_section  # noqa: E402
from tailrace.contract.summary import Estimate, RunSummary  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "tests" / "data" / "saved_runs" / "demo.summary.json"
TITLE = "Runs as a history: tailrace runs"


def make_runs(root: Path, n: int) -> None:
    base = RunSummary.from_json(DEMO.read_text())
    start = base.manifest.start_ns or 0
    for i in range(n):
        row = base.latency_row()
        row.percentiles["p99"] = Estimate(value=100.0 + i % 7, ci_low=99.0 + i % 7, ci_high=101.0 + i % 7)
        summary = base.model_copy(update={"run_id": f"demo-{i:05d}", "manifest": base.manifest.model_copy(
            update={"start_ns": start + i * 3_600 * 10**9})})
        run = root / f"demo-{i:05d}"
        (run / "report").mkdir(parents=True)
        (run / "manifest.json").write_text("{}")
        (run / "report" / "summary.json").write_text(summary.to_json())


def timed(history: Path, *args: str) -> float:
    began = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", *args], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "TAILRACE_HISTORY_DIR": str(history)})
    if r.returncode != 0:
        raise SystemExit(f"tailrace {' '.join(args)}: exit {r.returncode}: {r.stderr[-500:]}")
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cold, warm, trend = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        make_runs(root, args.runs)
        history = Path(tmp) / "history"
        catalogue = history / "catalogue.jsonl"
        for _ in range(args.repeats):
            catalogue.unlink(missing_ok=True)
            cold.append(timed(history, "runs", str(root), "--json"))
            warm.append(timed(history, "runs", str(root), "--json"))
            trend.append(timed(history, "runs", "trend", "demo", str(root), "--metric", "p99"))
        size = catalogue.stat().st_size

    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f} s ({min(xs):.2f}–{max(xs):.2f})"

    body = (f"Command: `{shown_command('bench/runs_history.py', sys.argv[1:])}` — {args.runs:,} runs of the demo's "
            f"summary, {args.repeats} repeats, each a fresh `tailrace` process (imports included); median (min–max).\n\n"
            "| what | time |\n|---|---|\n"
            f"| `tailrace runs DIR` cold: every summary.json read, then catalogued | {cell(cold)} |\n"
            f"| `tailrace runs DIR` from the catalogue ({size / 1e6:.2f} MB): each summary only stat'ed | {cell(warm)} |\n"
            f"| `tailrace runs trend demo DIR --metric p99` (every summary read) | {cell(trend)} |\n\n"
            f"Warm against cold: {statistics.median(cold) / statistics.median(warm):.1f}× in the median. A summary read "
            "for the history is validated in its headline only (who, when, the verdict, the latency and tokens tables: "
            "contract/summary/history.py's `SummaryHeadline`); the trend's figure labels at most 24 runs.")
    print(body)
    write_section(TITLE, body)


if __name__ == "__main__":
    main()
