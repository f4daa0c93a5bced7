"""Benchmark: `tailrace compare` of two large runs, this tree beside another, alternated on the same run directories.

Two comparisons of the 10 M-row synthetic run (bench/analysis_scale.py writes it): with itself — one schedule, so
the requests are paired by their place in it (the common-random-numbers path) — and with the run drawn from
seed 2 (independent samples: bootstrap and Mann–Whitney). Each command is one process, timed end to end with its
peak RSS (bench/analysis_scale.py's `timed`); both trees' compare.json must be the same, byte for byte.

    .venv/bin/python bench/compare_scale.py --baseline DIR [--rows 10000000] [--repeats 3] [--work /var/tmp/tailrace-scale]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.analysis_scale import TAILRACE, Timing, run_dir, timed  # noqa: E402
from bench.common import link_rooms, write_section  # noqa: E402

COMMAND = ".venv/bin/python bench/compare_scale.py --baseline DIR"


def _spread(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of another commit (git worktree add)")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/tailrace-scale"))
    args = ap.parse_args()
    if not (args.baseline / "analysis" / "decide" / "compare.py").exists():
        ap.error(f"--baseline {args.baseline}: not a tailrace checkout (no analysis/decide/compare.py)")
    link_rooms(args.baseline)
    a, b = run_dir(args.work, args.rows, 1), run_dir(args.work, args.rows, 2)
    here = Path(__file__).resolve().parent.parent
    pairs = {"paired (A with itself)": (a, a), "unpaired (A with B)": (a, b)}
    times: dict[tuple[str, str], list[Timing]] = {(p, t): [] for p in pairs for t in ("this", "baseline")}
    differ = []
    with tempfile.TemporaryDirectory(prefix="tailrace-compare-") as tmp:
        for r in range(args.repeats):
            for name, (x, y) in pairs.items():
                outs = {}
                for tree, cwd in (("baseline", args.baseline), ("this", here)):  # alternated: the same machine noise
                    outs[tree] = Path(tmp) / f"{tree}-{r}-{name[:6]}"
                    times[(name, tree)].append(timed([*TAILRACE, "compare", str(x), str(y), "--out", str(outs[tree])],
                                                     cwd=cwd))
                if (outs["this"] / "compare.json").read_bytes() != (outs["baseline"] / "compare.json").read_bytes():
                    differ.append(f"{name}, repeat {r + 1}")
                print(f"{name}: " + ", ".join(f"{t} {times[(name, t)][-1].wall:.1f} s "
                                              f"{times[(name, t)][-1].peak:.2f} GiB" for t in ("baseline", "this")),
                      flush=True)
    lines = [f"Command: `{COMMAND} --rows {args.rows} --repeats {args.repeats}` (the synthetic run directories of "
             f"{args.rows:,} rows each; medians, spread in brackets; each tree's run alternated with the other's).", "",
             "| comparison | tree | wall s | CPU s | peak RSS, GiB | time over the baseline's, per repeat |",
             "|---|---|---|---|---|---|"]
    for name in pairs:
        base, this = times[(name, "baseline")], times[(name, "this")]
        ratios = ", ".join(f"{t.wall / s.wall:.2f}" for t, s in zip(this, base))
        for tree, values in (("baseline", base), ("this", this)):
            lines.append(f"| {name} | {tree} | {_spread([t.wall for t in values])} | {_spread([t.cpu for t in values])} "
                         f"| {_spread([t.peak for t in values], 2)} | {ratios if tree == 'this' else ''} |")
    lines += ["", "compare.json: the same, byte for byte, in every repeat." if not differ else
              f"compare.json DIFFERS: {', '.join(differ)}."]
    write_section(f"Compare at scale: {args.rows:,} rows a run", "\n".join(lines))
    print("\n".join(lines))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
