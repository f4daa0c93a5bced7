"""Benchmark: the analysis's core query — exact p50/p90/p95/p99/p99.9 of successful measured latencies per
endpoint × region — on one synthetic run directory, by DuckDB, Polars and tailrace (its column reader, its
grouping, then numpy), each in its own process with its peak RSS. It checks that all three give numpy's numbers
(to 1 ns: the engines interpolate in another order, a few ulps apart).

DuckDB and Polars are not tailrace dependencies; install them in a scratch venv and pass its python:

    python3 -m venv /tmp/engines && /tmp/engines/bin/pip install duckdb polars
    .venv/bin/python bench/analysis_engines.py RUN_DIR --engines-python /tmp/engines/bin/python [--repeats 3]
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

COMMAND = ".venv/bin/python bench/analysis_engines.py"
QS = (0.5, 0.9, 0.95, 0.99, 0.999)

# one engine's query, run as a script: prints {"seconds", "gib", "groups": {"e|r": [n, q...]}}
QUERY = r'''
import glob, json, resource, sys, time
files = sorted(glob.glob(sys.argv[2] + "/regions/*/*/requests-*.parquet"))
qs = %s
engine = sys.argv[1]
t = time.perf_counter()
groups = {}
if engine == "duckdb":
    import duckdb
    con = duckdb.connect()
    con.execute("SET threads=2")
    for e, r, n, q in con.execute(f"""SELECT endpoint, region, count(*), quantile_cont(latency_ns, {list(qs)})
            FROM read_parquet({files!r}) WHERE phase > 0 AND status = 'ok' GROUP BY ALL""").fetchall():
        groups[f"{e}|{r}"] = [n, *q]
elif engine == "polars":
    import polars as pl
    out = (pl.scan_parquet(files).filter((pl.col("phase") > 0) & (pl.col("status") == "ok"))
           .group_by("endpoint", "region").agg([pl.len()] + [pl.col("latency_ns").quantile(q, interpolation="linear")
                                                            .alias(f"q{q}") for q in qs]).collect())
    for row in out.iter_rows():
        groups[f"{row[0]}|{row[1]}"] = list(row[2:])
else:
    import numpy as np
    from tailrace.analysis.read.frames import group_positions
    from tailrace.analysis.read.rundir import load_run
    df = load_run(sys.argv[2], ("endpoint", "region", "phase", "status", "latency_ns")).requests
    lat, ok = df["latency_ns"].to_numpy(), ((df["phase"] > 0) & (df["status"] == "ok")).to_numpy()
    for (e, r), idx in group_positions(df, ["endpoint", "region"]).items():
        x = lat[idx][ok[idx]]
        groups[f"{e}|{r}"] = [len(x), *(float(np.percentile(x, 100 * q)) for q in qs)]
print(json.dumps({"seconds": time.perf_counter() - t, "groups": groups,
                  "gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
''' % (QS,)


def run(python: str, engine: str, run_dir: Path) -> dict:
    out = subprocess.run([python, "-c", QUERY, engine, str(run_dir)], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent)
    if out.returncode:
        raise SystemExit(f"{engine}: {out.stderr.strip()[-1500:]}")
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--engines-python", required=True, help="a python with duckdb and polars installed")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    engines = {"duckdb": args.engines_python, "polars": args.engines_python, "tailrace (its reader and grouping, numpy)":
               sys.executable}
    results: dict[str, list[dict]] = {name: [] for name in engines}
    for _ in range(args.repeats):
        for name, python in engines.items():
            results[name].append(run(python, name.split()[0], args.run_dir))
    truth = results["tailrace (its reader and grouping, numpy)"][0]["groups"]
    rows = sum(v[0] for v in truth.values())
    lines = [f"Command: `{COMMAND} {args.run_dir.name} --engines-python … --repeats {args.repeats}` (the query: exact "
             f"p50…p99.9 of {rows:,} successful measured latencies in {len(truth)} endpoint × region groups, read "
             "from the run directory's Parquet chunks; 2 threads).", "",
             "| engine | wall s (median) | spread | peak RSS | numpy's numbers (within 1 ns) |", "|---|---|---|---|---|"]
    for name, values in results.items():
        secs = [v["seconds"] for v in values]
        same = all(v["groups"].keys() == truth.keys() and all(
            v["groups"][k][0] == truth[k][0] and max(abs(a - b) for a, b in zip(v["groups"][k][1:], truth[k][1:])) <= 1
            for k in truth) for v in values)
        lines.append(f"| {name} | {statistics.median(secs):.2f} | {min(secs):.2f}–{max(secs):.2f} | "
                     f"{max(v['gib'] for v in values):.2f} GiB | {'yes' if same else 'NO'} |")
    write_section("Analysis engines: exact grouped percentiles", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
