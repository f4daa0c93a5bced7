"""The runs as a history (analysis/history/, `tailrace runs`): run directories found under the directories given,
each listed from its catalogue line while its summary is unchanged, filtered by profile, verdict and time; one
metric trended across a profile's runs with its intervals and the significant changes flagged; what is no run, never
analysed or damaged, one line each, skipped and counted."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tailrace.analysis.history.catalogue import catalogue, record_run, selected
from tailrace.analysis.history.trend import TrendError, trend
from tailrace.cli import main
from tailrace.contract.summary import Estimate, RunSummary
from tests import ROOT

DEMO = ROOT / "tests" / "data" / "saved_runs" / "demo.summary.json"
HOUR_NS = 3_600 * 10**9
T0 = 1_796_380_000 * 10**9


def a_run(root: Path, name: str, hour: int, p99: float, half: float = 1.0, verdict: str = "PASS",
          profile: str = "demo", errors: int = 0, overrides: tuple[str, ...] = ()) -> Path:
    """A run directory whose summary is the saved demo's, with its own id, start, verdict, p99 and error count."""
    summary = RunSummary.from_json(DEMO.read_text())
    row = summary.latency_row()
    row.percentiles["p99"] = Estimate(value=p99, ci_low=p99 - half, ci_high=p99 + half, n=row.count)
    row.errors, row.error_rate = errors, errors / row.count
    summary = summary.model_copy(update={"run_id": name, "profile": profile, "verdict": verdict,
                                         "manifest": summary.manifest.model_copy(update={
                                             "start_ns": T0 + hour * HOUR_NS, "overrides": list(overrides)})})
    run_dir = root / name
    (run_dir / "report").mkdir(parents=True)
    (run_dir / "manifest.json").write_text("{}")
    (run_dir / "report" / "summary.json").write_text(summary.to_json())
    return run_dir


def test_runs_are_listed_oldest_first_and_filtered_by_profile_verdict_and_time(tmp_path):
    for name, hour, verdict, profile in (("b", 2, "FAIL", "demo"), ("a", 1, "PASS", "demo"), ("c", 3, "PASS", "other")):
        a_run(tmp_path / "runs", name, hour, 100.0, verdict=verdict, profile=profile)
    found = catalogue([tmp_path / "runs"])
    assert [e.run_id for _, e in found.entries] == ["a", "b", "c"] and found.skipped == []
    assert [e.run_id for _, e in selected(found.entries, profile="demo")] == ["a", "b"]
    assert [e.run_id for _, e in selected(found.entries, verdict="pass")] == ["a", "c"]
    assert [e.run_id for _, e in selected(found.entries, since_ns=T0 + 2 * HOUR_NS, until_ns=T0 + 3 * HOUR_NS)] == ["b"]
    first = found.entries[0][1]
    assert first.p99_ms == 100.0 and first.requests > 0 and first.p50_ms is not None


@pytest.fixture(autouse=True)
def history(tmp_path, monkeypatch) -> Path:
    """This test's own catalogue (contract/layout.py's HistoryLayout)."""
    monkeypatch.setenv("TAILRACE_HISTORY_DIR", str(tmp_path / "history"))
    return tmp_path / "history"


def test_a_catalogue_line_is_used_while_its_summary_is_unchanged_and_read_again_once_it_changes(tmp_path, history):
    run = a_run(tmp_path / "runs", "a", 1, 100.0)
    record_run(run, RunSummary.from_json((run / "report" / "summary.json").read_text()))
    catalogue_file = history / "catalogue.jsonl"
    line = json.loads(catalogue_file.read_text())
    catalogue_file.write_text(json.dumps(line | {"p99_ms": 7.0}) + "\n")  # the catalogue's, not the summary's
    assert catalogue([tmp_path / "runs"]).entries[0][1].p99_ms == 7.0  # the summary was not read
    summary = run / "report" / "summary.json"
    os.utime(summary, ns=(summary.stat().st_mtime_ns + 10**9,) * 2)  # analysed again since
    assert catalogue([tmp_path / "runs"]).entries[0][1].p99_ms == 100.0
    assert json.loads(catalogue_file.read_text().splitlines()[-1])["p99_ms"] == 100.0  # and catalogued
    catalogue_file.write_bytes(b"\x00\xff not a line\n" + catalogue_file.read_bytes() + b'{"run": 3}\n{"torn')
    assert [e.p99_ms for _, e in catalogue([tmp_path / "runs"]).entries] == [100.0]  # damaged lines left out


def test_the_catalogue_is_compacted_to_a_line_per_run_still_there(tmp_path, history, monkeypatch):
    from tailrace.analysis.history import catalogue as module

    monkeypatch.setattr(module, "COMPACT_AT", 3)
    runs = [a_run(tmp_path / "runs", name, hour, 100.0) for name, hour in (("a", 1), ("b", 2))]
    for run in runs * 3:  # each analysed three times
        record_run(run, RunSummary.from_json((run / "report" / "summary.json").read_text()))
    assert len((history / "catalogue.jsonl").read_text().splitlines()) == 6
    assert len(catalogue([tmp_path / "runs"]).entries) == 2
    assert len((history / "catalogue.jsonl").read_text().splitlines()) == 2


def test_what_is_no_run_never_analysed_or_damaged_is_one_line_each_and_the_rest_are_listed(tmp_path):
    a_run(tmp_path / "runs", "good", 1, 100.0)
    (tmp_path / "runs" / "never").mkdir()
    (tmp_path / "runs" / "never" / "manifest.json").write_text("{}")
    damaged = a_run(tmp_path / "runs", "damaged", 2, 100.0) / "report" / "summary.json"
    damaged.write_text(damaged.read_text()[:100])
    (tmp_path / "empty").mkdir()
    found = catalogue([tmp_path / "runs", tmp_path / "empty"])
    assert [e.run_id for _, e in found.entries] == ["good"]
    assert len(found.skipped) == 3 and all("\n" not in s for s in found.skipped)
    assert any("never: not analysed" in s and "tailrace analyze" in s for s in found.skipped)
    assert any("damaged/report/summary.json: not JSON" in s for s in found.skipped)
    assert any("empty: not a run directory, and holds none" in s for s in found.skipped)


def test_a_jump_beyond_the_intervals_is_flagged_and_a_wobble_within_them_is_not(tmp_path):
    for name, hour, p99 in (("a", 1, 100.0), ("b", 2, 100.8), ("c", 3, 120.0), ("d", 4, 119.0)):
        a_run(tmp_path, name, hour, p99, half=2.0)
    runs = [(e, RunSummary.from_json((d / "report" / "summary.json").read_text()))
            for d, e in catalogue([tmp_path]).entries]
    t = trend(runs, "demo", "p99")
    assert [p.value for p in t.points] == [100.0, 100.8, 120.0, 119.0]
    assert [p.significant for p in t.points] == [False, False, True, False]
    assert t.points[2].change == pytest.approx(19.2) and t.points[2].relative == pytest.approx(19.2 / 100.8)
    assert t.points[2].p_value < 1e-6 and t.points[0].p_value is None
    with pytest.raises(TrendError, match="p77"):
        trend(runs, "demo", "p77")


def test_a_run_with_other_settings_is_not_judged_against_the_one_before(tmp_path, capsys, history):
    """A sweep's points and `--set` runs share their profile's name: a p99 that doubles from load.rate=3 to 6 is the
    load's doing, not a build's — shown as the settings that changed, never flagged; a later run at the same settings
    as the one before is judged again."""
    for name, hour, p99, sets in (("a", 1, 100.0, ()), ("b", 2, 200.0, ("load.rate=6",)),
                                  ("c", 3, 260.0, ("load.rate=6",)), ("d", 4, 100.0, ())):
        a_run(tmp_path / "runs", name, hour, p99, overrides=sets)
    runs = [(e, RunSummary.from_json((d / "report" / "summary.json").read_text()))
            for d, e in catalogue([tmp_path / "runs"]).entries]
    t = trend(runs, "demo", "p99")
    assert [p.settings_changed for p in t.points] == [[], ["load.rate=6"], [], ["load.rate"]]
    assert [p.significant for p in t.points] == [False, False, True, False]
    assert t.points[1].p_value is None and t.points[2].change == pytest.approx(60.0)
    assert main(["runs", str(tmp_path / "runs")]) == 0
    assert "load.rate=6" in capsys.readouterr().out  # the settings column
    assert main(["runs", "trend", "demo", str(tmp_path / "runs")]) == 0
    assert "settings: load.rate=6" in capsys.readouterr().out
    page = (history / "trend-demo-p99.html").read_text()
    assert "settings: load.rate=6" in page and "other settings" in page
    assert "<td class='l'>load.rate=6</td>" in (history / "runs.html").read_text()


def test_an_error_rate_that_rises_is_judged_on_the_counts(tmp_path):
    for name, hour, errors in (("a", 1, 0), ("b", 2, 1), ("c", 3, 60)):
        a_run(tmp_path, name, hour, 100.0, errors=errors)
    runs = [(e, RunSummary.from_json((d / "report" / "summary.json").read_text()))
            for d, e in catalogue([tmp_path]).entries]
    t = trend(runs, "demo", "error_rate")
    assert [p.significant for p in t.points] == [False, False, True] and t.unit == "fraction"
    assert t.points[2].ci_low < t.points[2].value < t.points[2].ci_high


def test_the_command_lists_trends_and_writes_a_page_each_bad_input_one_line(tmp_path, capsys, history):
    for name, hour, p99 in (("a", 1, 100.0), ("b", 2, 150.0)):
        a_run(tmp_path / "runs", name, hour, p99)
    assert main(["runs", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "2 run(s)" in out and (history / "runs.html").exists()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["a", "b"]  # a directory of runs holds runs only
    assert main(["runs", "trend", "demo", str(tmp_path / "runs"), "--metric", "p99"]) == 0
    out = capsys.readouterr().out
    assert "+50 (+50.0%) *" in out
    page = (history / "trend-demo-p99.html").read_text()
    assert "<svg" in page and "class=sig" in page
    assert main(["runs", "trend", "demo", str(tmp_path / "runs"), "--metric", "p77"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["runs", str(tmp_path / "runs"), "--since", "yesterday"]) == 2
    assert "--since/--until 'yesterday'" in capsys.readouterr().err
    assert main(["runs", "trend", "nobody", str(tmp_path / "runs")]) == 2
    assert "no analysed run of profile 'nobody'" in capsys.readouterr().err


def test_the_directories_may_follow_the_options_as_the_guide_writes_them(tmp_path, capsys, history):
    """`tailrace runs trend P --metric p99 DIR` and `tailrace runs DIR --profile P DIR2`: argparse alone refused a
    positional after an option ("unrecognized arguments"); an unknown option is still one usage error."""
    for name, hour, p99 in (("a", 1, 100.0), ("b", 2, 150.0)):
        a_run(tmp_path / "runs", name, hour, p99)
    assert main(["runs", "trend", "demo", "--metric", "p99", str(tmp_path / "runs")]) == 0
    assert "+50 (+50.0%) *" in capsys.readouterr().out
    (tmp_path / "more").mkdir()
    assert main(["runs", str(tmp_path / "more"), "--profile", "demo", str(tmp_path / "runs")]) == 0
    assert "2 run(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stopped:
        main(["runs", str(tmp_path / "runs"), "--bogus"])
    assert stopped.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["analyze", str(tmp_path / "runs" / "a"), "--bogus"])
    assert stopped.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err
