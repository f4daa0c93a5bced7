"""`tailrace analyze`: load a run directory, compute the summary, print it, exit with the verdict's code."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.rundir import RunDirError, load_run

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_INVALID = 0, 1, 2, 3, 4


def basic_summary(df: pd.DataFrame) -> list[dict]:
    """Per region × endpoint: count, errors, p50/p99 latency (ms), send lag p99, accuracy."""
    rows = []
    measured = df[df["phase"] > 0]
    for (region, endpoint), g in measured.groupby(["region", "endpoint"], sort=True):
        lat = g["latency_ns"].to_numpy() / 1e6
        ok = g["status"] == "ok"
        rows.append({"region": region, "endpoint": endpoint, "count": int(len(g)), "errors": int((~ok).sum()),
                     "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
                     "send_lag_p99_ms": float(np.percentile(g["send_lag_ns"] / 1e6, 99)),
                     "accuracy": float(g.loc[ok, "correct"].mean()) if ok.any() else None})
    return rows


def analyze_and_report(run_dir: Path, out: Path | None, quiet: bool = False) -> int:
    """Analyse `run_dir`; returns the exit code."""
    from rich.console import Console
    from rich.table import Table

    try:
        data = load_run(run_dir)
    except RunDirError as exc:
        print(f"tailrace analyze: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for s in data.skipped:
        print(f"skipped {s.path}: {s.reason}", file=sys.stderr)
    rows = basic_summary(data.requests)
    out = out or data.run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    valid = data.manifest.get("valid", True)
    summary = {"run_id": data.manifest.get("run_id"), "valid": valid,
               "invalid_reasons": data.manifest.get("invalid_reasons", []),
               "rows_read": int(len(data.requests)), "chunks_read": data.chunks_read,
               "chunks_skipped": [s.__dict__ for s in data.skipped], "groups": rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if not quiet:
        table = Table(title=f"run {summary['run_id']} — {'VALID' if valid else 'INVALID'}")
        for col in ("region", "endpoint", "requests", "errors", "p50 ms", "p99 ms", "send lag p99 ms", "accuracy"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(r["region"], r["endpoint"], f"{r['count']:,}", f"{r['errors']:,}", f"{r['p50_ms']:.2f}",
                          f"{r['p99_ms']:.2f}", f"{r['send_lag_p99_ms']:.2f}",
                          "-" if r["accuracy"] is None else f"{r['accuracy']:.4f}")
        Console().print(table)
        for reason in summary["invalid_reasons"]:
            print(f"INVALID: {reason}")
    return EXIT_PASS if valid else EXIT_INVALID
