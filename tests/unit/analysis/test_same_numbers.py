"""A refactor changes no number: `tailrace analyze`'s summary of a fixed run directory (seeded: two regions with
skewed clocks, errors, a latency that drifts up through the run, a latency and an error-rate SLO) is the one
recorded in data/golden_summary.json, key by key and bit by bit. A change meant to change a number rewrites the file
on purpose, and says why in its commit:

    PYTHONPATH=. .venv/bin/python -m tests.unit.analysis.test_same_numbers --write
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS
from tests.support import profile_dict, write_run

GOLDEN = Path(__file__).parent / "data" / "golden_summary.json"


def golden_run(run_dir: Path) -> Path:
    profile = profile_dict(200, 10, slos=[
        {"metric": "latency", "percentile": 95, "threshold_ms": 60, "endpoint": "*", "region": "*"},
        {"metric": "error_rate", "threshold": 0.05, "endpoint": "*", "region": "*"}])
    write_run(run_dir, profile=profile, seed=7, workers={
        "r1-w0": {"region": "r1", "offset_ms": 3, "rate": 100, "duration_s": 10, "errors": 0.01,
                  "latency_ms": lambda n, rng: 5 + rng.exponential(4, n)},
        "r2-w0": {"region": "r2", "offset_ms": -20, "rate": 100, "duration_s": 10,
                  "latency_ms": lambda n, rng: 12 + rng.gamma(2, 3, n) * np.linspace(1, 2.5, n)}})
    return run_dir


def summary_of(run_dir: Path) -> dict:
    """The summary as summary.json holds it (JSON's own rounding of floats: what a reader compares)."""
    return json.loads(json.dumps(analyze_run(golden_run(run_dir), ANALYSIS_COLUMNS).summary.to_dict()))


def differences(a, b, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in (differences(a[k], b[k], f"{path}.{k}") if k in a and k in b else [f"{path}.{k}: only in "
                                                                                             f"{'now' if k in a else 'golden'}"])]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {str(a)[:80]} (golden: {str(b)[:80]})"]


def test_the_summary_of_a_fixed_run_is_the_recorded_one(tmp_path):
    now = summary_of(tmp_path / "golden-run")
    assert not differences(now, json.loads(GOLDEN.read_text())), differences(now, json.loads(GOLDEN.read_text()))[:20]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.write_text(json.dumps(summary_of(Path(tmp) / "golden-run"), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
