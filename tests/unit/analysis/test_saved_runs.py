"""A refactor changes no number, on real runs: `tailrace analyze` of each saved run directory
(tests/data/saved_runs/: the demo, with its hardware monitor; RAG pipelines beside agent sessions) writes the
summary.json recorded beside it, key by key and bit by bit. A change meant to change a number rewrites the recorded
summaries on purpose, and says why in its commit:

    PYTHONPATH=. .venv/bin/python -m tests.unit.analysis.test_saved_runs --write
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tailrace.cli import main
from tests import ROOT
from tests.unit.analysis.test_same_numbers import differences

SAVED = ROOT / "tests" / "data" / "saved_runs"
RUNS = ("demo", "sessions-pipelines")


def analysed(name: str, work: Path) -> dict:
    """`tailrace analyze` of a copy of the saved run `name` (its exit code is the verdict's): its summary.json."""
    run_dir = work / name
    shutil.copytree(SAVED / name, run_dir)
    main(["analyze", str(run_dir), "--quiet"])
    return json.loads((run_dir / "report" / "summary.json").read_text())


@pytest.mark.parametrize("name", RUNS)
def test_analyze_writes_the_recorded_summary_of_a_saved_run(name, tmp_path):
    now = analysed(name, tmp_path)
    recorded = json.loads((SAVED / f"{name}.summary.json").read_text())
    found = differences(now, recorded)
    assert not found, found[:20]


def test_the_saved_runs_hold_what_they_are_kept_for(tmp_path):
    """The demo's monitor measured the embedded server, beside streams and pooled endpoints; the other run has
    sessions and pipelines in its summary."""
    demo = json.loads((SAVED / "demo.summary.json").read_text())
    assert demo["hardware"]["rows"] and demo["tokens"] and demo["embeddings"] and demo["cancellations"]
    both = json.loads((SAVED / "sessions-pipelines.summary.json").read_text())
    assert both["sessions"]["turns"] and both["pipelines"]["pipelines"]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    for run in RUNS:
        with tempfile.TemporaryDirectory() as tmp:
            summary = analysed(run, Path(tmp))
        (SAVED / f"{run}.summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
        print(f"wrote {SAVED / run}.summary.json")
