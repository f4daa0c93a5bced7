"""Verdicts of whole runs: regions that sent nothing, runs that only failed, refused requests and error-rate SLOs, and
compare judging each run as analyze does."""


from __future__ import annotations

import shutil

import pytest

from tailrace.analysis.analyze import analyze_run
from tests.support import profile_dict, write_run
from tests.unit.analysis.read.test_run_directory import _corrupt_latency_pages, _synthetic, _two_regions


def test_a_region_that_sent_nothing_is_in_the_verdict_not_missing(tmp_path):
    _two_regions(tmp_path)
    s = analyze_run(tmp_path).summary.to_dict()
    by_region = {v["region"]: v for v in s["slos"]}
    assert by_region["r1"]["verdict"] == "PASS"
    assert by_region["r2"]["n"] == 0 and by_region["r2"]["verdict"] == "INCONCLUSIVE"
    assert s["verdict"] == "INCONCLUSIVE"


def test_a_run_in_which_every_request_failed_gets_its_full_report(tmp_path):
    from tailrace.analysis.report.html import render

    profile = profile_dict(100, 10, slos=[{"metric": "latency", "percentile": 99, "threshold_ms": 50,
                                           "endpoint": "*", "region": "*"}])
    write_run(tmp_path, profile=profile, workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 50, "duration_s": 10, "errors": 1.0},
        "r2-w0": {"region": "r2", "latency_ms": 5, "rate": 50, "duration_s": 10, "errors": 1.0}})
    a = analyze_run(tmp_path)
    assert a.summary.to_dict()["verdict"] == "FAIL" and a.summary.to_dict()["errors"][0]["count"] == 1000
    page = render(a)
    assert "no successful request" in page and page.index("<h2>Errors</h2>") < page.index("SLO verdicts at a glance")


@pytest.mark.parametrize("error_fraction,verdict,code", [(0.05, "FAIL", 1), (0.0, "PASS", 0)])
def test_refused_requests_fail_a_run_that_declares_no_slo(tmp_path, error_fraction, verdict, code):
    """With no SLO in the profile, every endpoint × region is held to an implicit error rate of ≤ 1%: a run whose
    requests were refused ends in FAIL, never in PASS for want of a goal."""
    write_run(tmp_path, profile=profile_dict(100, 10), workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 50, "duration_s": 10, "errors": error_fraction},
        "r2-w0": {"region": "r2", "latency_ms": 5, "rate": 50, "duration_s": 10}})
    s = analyze_run(tmp_path).summary.to_dict()
    assert (s["verdict"], s["exit_code"]) == (verdict, code)
    by_region = {v["region"]: v for v in s["slos"]}
    assert all(v["implicit"] and "implicit" in v["description"] for v in s["slos"])
    assert by_region["r1"]["verdict"] == verdict and by_region["r2"]["verdict"] == "PASS"


def test_a_declared_error_rate_slo_replaces_the_implicit_one_where_it_applies():
    from tailrace.analysis.stats.slo import with_implicit_slos

    declared = [{"metric": "error_rate", "threshold": 0.2, "endpoint": "e1", "region": "*"},
                {"metric": "latency", "percentile": 99, "threshold_ms": 50, "endpoint": "*", "region": "*"}]
    judged = with_implicit_slos(declared, ["e1", "e2"], ["r1", "r2"])
    implicit = [(s["endpoint"], s["region"]) for s in judged if s.get("implicit")]
    assert judged[:2] == declared and implicit == [("e2", "r1"), ("e2", "r2")]
    assert [s["endpoint"] for s in with_implicit_slos(declared[1:], ["e1", "e2"], ["r1"]) if s.get("implicit")] == ["*"]


def test_compare_names_a_chunk_it_could_not_read(tmp_path, capsys):
    """tailrace compare of a run with a corrupt chunk compares the rows it could read, says which chunk it left
    out and exits INVALID, as tailrace analyze does: never a silent drop of measured rows, never a gate's pass."""
    from tailrace.analysis.decide.compare import compare_command

    run_dir = _synthetic(tmp_path)
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    chunk = sorted(run_dir.glob("regions/*/*/requests-*.parquet"))[0]
    _corrupt_latency_pages(chunk)
    assert compare_command(other, other, None) == 0
    capsys.readouterr()
    assert compare_command(run_dir, other, None, fail_if_slower=["p99:5%"]) == 4
    err = capsys.readouterr().err
    assert f"tailrace compare: skipped {chunk}: " in err and "Traceback" not in err, err
    assert f"tailrace compare: INVALID: A ({run_dir}): 1 request chunk(s) could not be read ({chunk};" in err, err


def test_compare_judges_each_run_as_analyze_does(tmp_path, capsys):
    """tailrace compare of a run whose manifest is INVALID (a saturated generator, say), or whose run directory
    lacks chunks a worker wrote, still prints the table but exits INVALID naming the run and the reason: a
    --fail-if-slower gate never passes on numbers tailrace analyze would not trust."""
    import json

    from tailrace.analysis.decide.compare import compare_command

    run_dir = _synthetic(tmp_path)
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    assert compare_command(run_dir, other, None, fail_if_slower=["p99:50%"]) == 0
    capsys.readouterr()

    manifest = json.loads((other / "manifest.json").read_text())
    manifest |= {"valid": False, "invalid_reasons": ["eu-west-w0: send lag p99 120 ms: the generator saturated"]}
    (other / "manifest.json").write_text(json.dumps(manifest))
    assert compare_command(run_dir, other, None, fail_if_slower=["p99:50%"]) == 4
    captured = capsys.readouterr()
    assert "Δp99" in captured.out  # the table is still there
    assert (f"tailrace compare: INVALID: B ({other}): eu-west-w0: send lag p99 120 ms: the generator saturated"
            in captured.err), captured.err

    chunk = sorted(run_dir.glob("regions/*/*/requests-*.parquet"))[0]
    chunk.unlink()
    assert compare_command(run_dir, run_dir, None) == 4
    err = capsys.readouterr().err
    assert f"tailrace compare: INVALID: A ({run_dir}): {chunk.parent.name}: " in err, err
    assert "requests it recorded are not in the run directory" in err and "Traceback" not in err, err
