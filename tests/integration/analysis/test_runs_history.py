"""`tailrace runs` on runs analysed for real: two copies of the saved demo run analysed by `tailrace analyze` (each
catalogued as its report is written), listed, a metric trended across them, both pages read in headless Chromium
with their links to each run's report."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests import ROOT
from tests.support import browser_page, chromium

pytestmark = pytest.mark.shares_machine  # functional: reads saved runs, starts no server
SAVED = ROOT / "tests" / "data" / "saved_runs" / "demo"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailrace.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_runs_analysed_are_catalogued_listed_trended_and_their_pages_read_in_a_browser(tmp_path, monkeypatch):
    executable = chromium()
    history = tmp_path / "history"
    monkeypatch.setenv("TAILRACE_HISTORY_DIR", str(history))  # the processes below inherit it
    runs = tmp_path / "runs"
    for name in ("first", "second"):
        shutil.copytree(SAVED, runs / name)
        r = cli("analyze", str(runs / name), "--quiet")
        assert r.returncode in (0, 1, 3), r.stderr[-2000:]
    lines = [json.loads(line) for line in (history / "catalogue.jsonl").read_text().splitlines()]
    assert sorted(line["run"] for line in lines) == [str(runs / "first"), str(runs / "second")]  # as each report was
    assert sorted(p.name for p in runs.iterdir()) == ["first", "second"]  # a directory of runs holds runs only
    (runs / "notes").mkdir()  # not a run: ignored inside a directory of runs
    listed = cli("runs", str(runs), "--profile", "demo")
    assert listed.returncode == 0 and "2 run(s)" in listed.stdout, listed.stdout + listed.stderr
    trended = cli("runs", "trend", "demo", str(runs), "--metric", "p50")
    assert trended.returncode == 0 and "across 2 run(s)" in trended.stdout, trended.stdout + trended.stderr
    with browser_page(executable) as page:
        page.goto((history / "runs.html").as_uri())
        assert page.locator("#runs tr").count() == 3  # the head and two runs
        page.click("#runs tr:nth-child(2) a")
        page.wait_for_selector("#verdict", timeout=10_000)  # the run's own report
        page.goto((history / "trend-demo-p50.html").as_uri())
        assert page.locator("#trend tr").count() == 3 and page.locator("svg").count() == 1
        assert page.errors == [], page.errors
