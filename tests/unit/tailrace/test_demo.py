"""`make demo` is a first look: its closing line (the verdict, the report, what is not PASS and why)."""
from __future__ import annotations

import json
from pathlib import Path

from tailrace.contract.summary import RunSummary
from tailrace.demo import closing_line

DATA = Path(__file__).parents[1] / "contract" / "data"


def _summary_with(tmp_path: Path, **changes) -> Path:
    raw = json.loads((DATA / "demo_summary_v2.json").read_text())
    raw.update(changes)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(raw))
    return path


def test_the_demo_ends_with_one_line_naming_what_is_not_pass(tmp_path):
    raw = json.loads((DATA / "demo_summary_v2.json").read_text())
    assert RunSummary.of(raw).verdict == "PASS"
    page = tmp_path / "index.html"
    assert closing_line(_summary_with(tmp_path), page) == f"demo: PASS — report: {page}"
    slos = raw["slos"]
    slos[0] = {**slos[0], "verdict": "INCONCLUSIVE", "reason": "phase 2: backlog growing"}
    line = closing_line(_summary_with(tmp_path, slos=slos, verdict="INCONCLUSIVE", exit_code=3), page)
    assert line.startswith(f"demo: INCONCLUSIVE — report: {page} — {slos[0]['description']} · "
                           f"{slos[0]['endpoint']} · {slos[0]['region']}: INCONCLUSIVE, measured ")
    assert line.endswith("— phase 2: backlog growing") and "\n" not in line
    invalid = closing_line(_summary_with(tmp_path, verdict="INVALID", exit_code=4,
                                         invalid_reasons=["r1-w0: no worker summary"]), page)
    assert invalid == f"demo: INVALID — report: {page} — r1-w0: no worker summary"


def test_a_summary_that_cannot_be_read_back_is_one_error_naming_it(tmp_path):
    """closing_line names the file when summary.json is damaged (run_demo then prints the report's path instead)."""
    import pytest

    from tailrace.contract.summary import SummaryError

    damaged = tmp_path / "summary.json"
    damaged.write_text('{"verdict": "PA')
    with pytest.raises((SummaryError, ValueError)):
        closing_line(damaged, tmp_path / "index.html")
