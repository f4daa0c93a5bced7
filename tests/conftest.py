"""Fixtures come from tests/support.py (one support module); integration tests are marked in
tests/integration/conftest.py. At the end of a run, each tier's time is set against its budget in docs/CI.md."""
from __future__ import annotations

import re
from collections import defaultdict

from tests import ROOT

pytest_plugins = ("tests.support",)

# docs/CI.md's budget table: "| lint + unit (`make test-fast`) | 2 min | …", "| integration (real processes) | 22 min |"
BUDGET_ROW = re.compile(r"^\| (lint \+ unit|integration)[^|]*\| (\d+(?:\.\d+)?) min \|", re.M)
_spent: dict[str, float] = defaultdict(float)


def tier_budgets(text: str) -> dict[str, float]:
    """Minutes per tier ("unit", "integration") from docs/CI.md's table."""
    return {("unit" if name.startswith("lint") else "integration"): float(minutes)
            for name, minutes in BUDGET_ROW.findall(text)}


def pytest_runtest_logreport(report) -> None:
    _spent["integration" if "/integration/" in report.nodeid or report.nodeid.startswith("tests/integration")
           else "unit"] += report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    budgets = tier_budgets((ROOT / "docs" / "CI.md").read_text())
    for tier, seconds in sorted(_spent.items()):
        budget = budgets.get(tier)
        if budget is None:
            continue
        verdict = "within" if seconds <= budget * 60 else "OVER"
        terminalreporter.write_line(f"tier budget (docs/CI.md): {tier} {seconds / 60:.1f} min, {verdict} its "
                                    f"{budget:g} min")
