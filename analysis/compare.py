"""`tailrace compare RUN_A RUN_B`: per endpoint × region, is B faster, slower, or not significantly different?"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from analysis.frames import take_rows
from analysis.rundir import COMPARE_BYTES_PER_ROW, RunDirError, check_fits, load_run
from analysis.stats import bootstrap_diff_ci, cohens_d

PERCENTILES = (50, 95, 99)
COMPARE_COLUMNS = ("endpoint", "region", "phase", "status", "latency_ns")


def _latencies(df: pd.DataFrame) -> pd.DataFrame:
    return take_rows(df, ((df["phase"] > 0) & (df["status"] == "ok")).to_numpy(), ["endpoint", "region", "latency_ns"])


def compare_groups(a: np.ndarray, b: np.ndarray, seed: int = 0) -> dict:
    """Differences B − A (ms) with bootstrap CIs, Mann–Whitney U p-value, Cohen's d, verdict."""
    out = {"n_a": int(len(a)), "n_b": int(len(b))}
    for p in PERCENTILES:
        d, lo, hi = bootstrap_diff_ci(a, b, p, seed=seed)
        out[f"p{p}_a_ms"] = float(np.percentile(a, p))
        out[f"p{p}_b_ms"] = float(np.percentile(b, p))
        out[f"p{p}_diff_ms"], out[f"p{p}_ci_low"], out[f"p{p}_ci_high"] = d, lo, hi
    mw = stats.mannwhitneyu(a, b, alternative="two-sided")
    out["mann_whitney_p"] = float(mw.pvalue)
    out["cohens_d"] = cohens_d(a, b)
    significant = mw.pvalue < 0.05 and (out["p50_ci_low"] > 0 or out["p50_ci_high"] < 0)
    if not significant:
        out["verdict"] = "no significant difference"
    else:
        out["verdict"] = "B slower" if out["p50_diff_ms"] > 0 else "B faster"
    return out


def compare_runs(run_a: Path, run_b: Path) -> list[dict]:
    """One comparison row per endpoint × region present in both runs."""
    a = _latencies(load_run(run_a, COMPARE_COLUMNS).requests)
    b = _latencies(load_run(run_b, COMPARE_COLUMNS).requests)
    rows = []
    groups_b = b.groupby(["endpoint", "region"], observed=True).indices
    for (endpoint, region), ga in a.groupby(["endpoint", "region"], sort=True, observed=True):
        gb = b.iloc[groups_b.get((endpoint, region), [])]
        if len(ga) < 20 or len(gb) < 20:
            continue
        rows.append({"endpoint": endpoint, "region": region,
                     **compare_groups(ga["latency_ns"].to_numpy() / 1e6, gb["latency_ns"].to_numpy() / 1e6)})
    return rows


def compare_command(run_a: Path, run_b: Path, out: Path | None) -> int:
    """Print the comparison (and write it as JSON/CSV when --out is given); exit 2 on unreadable runs."""
    from rich.console import Console
    from rich.table import Table

    try:
        check_fits([run_a, run_b], COMPARE_BYTES_PER_ROW, "compare")
        rows = compare_runs(run_a, run_b)
    except RunDirError as exc:
        print(f"tailrace compare: {exc}", file=sys.stderr)
        return 2
    table = Table(title=f"B = {run_b.name} vs A = {run_a.name} (ms, B − A, 95% bootstrap CI)")
    for col in ("endpoint", "region", "Δp50", "Δp95", "Δp99", "Mann–Whitney p", "Cohen's d", "verdict"):
        table.add_column(col, justify="right")
    for r in rows:
        cells = [f"{r[f'p{p}_diff_ms']:+.2f} [{r[f'p{p}_ci_low']:+.2f}, {r[f'p{p}_ci_high']:+.2f}]" for p in PERCENTILES]
        table.add_row(r["endpoint"], r["region"], *cells, f"{r['mann_whitney_p']:.3g}", f"{r['cohens_d']:+.2f}",
                      r["verdict"])
    Console().print(table)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.json").write_text(json.dumps(rows, indent=2))
        pd.DataFrame(rows).to_csv(out / "compare.csv", index=False)
    return 0
