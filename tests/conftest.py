"""Fixtures come from tests/support.py (one support module); integration tests are marked in
tests/integration/conftest.py. At the end of a run, each tier's time is set against its budget in docs/CI.md.

Under pytest-xdist (`make test` runs two workers, a test file each), a test has the machine to itself unless it
is marked `shares_machine`: those may run beside each other, and nothing else runs beside a test without the
mark (its timings, send lags and verdicts are measured on a quiet machine, as they were before xdist). Every
unit test shares the machine; an integration module opts in with `pytestmark = pytest.mark.shares_machine`."""
from __future__ import annotations

import json
import os
import re
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests import ROOT

pytest_plugins = ("tests.support", "tests.stall_watch")

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


def pytest_configure(config) -> None:
    """The runs' catalogue (contract/layout.py's HistoryLayout) of this session's runs apart from the user's: every
    process a test starts inherits it."""
    if not os.environ.get("TAILRACE_HISTORY_DIR"):
        import tempfile

        os.environ["TAILRACE_HISTORY_DIR"] = tempfile.mkdtemp(prefix="tailrace-test-history-")


# `make test`: the file to which the installs the integration tier needs (Triton, vLLM, Phoenix, the image, the
# generator-only virtualenv), run in the background beside lint, the type check and the unit tier, write their exit
# status (their log beside it, .log for .rc). An integration test waits for it before it takes its turn.
PREREQUISITES_ENV = "TAILRACE_PREREQUISITES"
_prerequisites: str | None = None  # not waited for yet; "" once they are in place; else why they are not


def prerequisites_missing(status_file: Path) -> str:
    """tests/support.py's prerequisites_status, waited for once per process."""
    global _prerequisites
    if _prerequisites is None:
        from tests.support import prerequisites_status

        _prerequisites = prerequisites_status(status_file)
    return _prerequisites


def pytest_runtest_setup(item) -> None:
    why = getattr(item, "tailrace_prerequisites_missing", "")
    if why:
        pytest.fail(why, pytrace=False)


def pytest_collection_modifyitems(items) -> None:
    """Every unit test shares the machine; the files in the order the two workers take them (tests/durations.py,
    with `--dist loadfile --no-loadscope-reorder`): the unit tier, then the files by their share of time alone."""
    from tests.durations import file_order, load

    for item in items:
        if "/tests/unit/" in str(item.path):
            item.add_marker(pytest.mark.shares_machine)
    durations, alone = load(), set()
    for item in items:
        if item.get_closest_marker("shares_machine") is None:
            alone.add(item.path)
    files = {item.path: file_order(str(item.path.relative_to(ROOT)), item.path in alone, durations) for item in items}
    items.sort(key=lambda item: files[item.path])  # stable: a file's tests keep their order


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Outside pytest-timeout's timer and the reported durations: the wait for the machine is neither."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    from tests.support import machine_turn  # the plugin module, imported once pytest rewrites its asserts

    status_file = os.environ.get(PREREQUISITES_ENV)
    if status_file and "/tests/integration/" in str(item.path):  # before its turn: the unit tier goes on meanwhile
        item.tailrace_prerequisites_missing = prerequisites_missing(Path(status_file))
    lock_dir = item.config._tmp_path_factory.getbasetemp().parent  # one per session, beside every worker's basetemp
    shared = item.get_closest_marker("shares_machine") is not None
    next_alone = nextitem is not None and nextitem.get_closest_marker("shares_machine") is None
    asked = time.time()
    with machine_turn(lock_dir, shared=shared, keep=not shared and next_alone):
        began = time.time()
        yield
    timeline = os.environ.get("TAILRACE_TEST_TIMELINE")  # where CI's minutes go: one line a test
    if timeline:
        with open(timeline, "a") as out:
            out.write(json.dumps({"test": item.nodeid, "worker": os.environ["PYTEST_XDIST_WORKER"], "shared": shared,
                                  "asked": asked, "began": began, "ended": time.time()}) + "\n")
