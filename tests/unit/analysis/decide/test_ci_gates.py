"""tailrace in CI pipelines: report/junit.xml (analysis/report/junit.py), `compare --fail-if-slower` as a regression gate,
`compare` with nothing in common, and the exit code of tailrace itself failing (contract/exit_codes.py)."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tailrace import cli
from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.decide.compare import compare_command
from tailrace.analysis.report.junit import junit_xml
from tailrace.contract import exit_codes
from tests.support import profile_dict, write_run


def _run(path: Path, slow: float = 1.0, seed: int = 1, regions=("r1", "r2"), slos=None) -> Path:
    profile = profile_dict(100, 20, regions=regions, slos=slos)
    write_run(path, profile=profile, seed=seed, workers={
        f"{r}-w0": {"region": r, "rate": 50, "duration_s": 20,
                    "latency_ms": lambda n, rng, f=slow * (1 + i): rng.lognormal(np.log(10 * f), 0.2, n)}
        for i, r in enumerate(regions)})
    return path


def test_junit_has_one_case_per_verdict_failures_and_skips_as_ci_reads_them(tmp_path):
    slos = [{"metric": "latency", "percentile": 50, "threshold_ms": 15, "endpoint": "*", "region": "*"},
            {"metric": "latency", "percentile": 99.9, "threshold_ms": 1000, "endpoint": "*", "region": "*"}]
    summary = analyze_run(_run(tmp_path / "a", slos=slos)).summary
    root = ET.fromstring(junit_xml(summary))
    cases = root.findall("testcase")
    assert len(cases) == len(summary.slos) == int(root.get("tests"))
    by_verdict = {v: sum(s.verdict == v for s in summary.slos) for v in ("PASS", "FAIL", "INCONCLUSIVE")}
    assert by_verdict["FAIL"] >= 1 and by_verdict["INCONCLUSIVE"] >= 1  # r2 at ~20 ms fails p50 < 15; p99.9 needs more
    assert len(root.findall("testcase/failure")) == by_verdict["FAIL"] == int(root.get("failures"))
    assert len(root.findall("testcase/skipped")) == by_verdict["INCONCLUSIVE"] == int(root.get("skipped"))
    assert all("more samples" in s.get("message") for s in root.findall("testcase/skipped"))
    assert {c.get("classname") for c in cases} == {"synthetic.e1.r1", "synthetic.e1.r2"}


def test_the_regression_gate_trips_on_a_slower_p99_beyond_the_margin_only(tmp_path, capsys):
    a, slower, same = _run(tmp_path / "a"), _run(tmp_path / "b", slow=1.3, seed=2), _run(tmp_path / "c", seed=3)
    assert compare_command(a, slower, None, fail_if_slower=["p99:5%"]) == exit_codes.FAIL
    assert "--fail-if-slower: e1/r1: p99 slower" in capsys.readouterr().err
    assert compare_command(a, slower, None, fail_if_slower=["p50:80%"]) == exit_codes.PASS  # 30% < 80%
    assert compare_command(a, same, None, fail_if_slower=["p99:5%"]) == exit_codes.PASS
    assert compare_command(a, same, None, fail_if_slower=["p98:5%"]) == exit_codes.USAGE
    assert "--fail-if-slower 'p98:5%'" in capsys.readouterr().err


def test_compare_with_nothing_in_common_exits_2_and_says_so(tmp_path, capsys):
    a, other = _run(tmp_path / "a"), _run(tmp_path / "b", regions=("r7",))
    assert compare_command(a, other, None) == exit_codes.USAGE
    err = capsys.readouterr().err
    assert "no endpoint × region in common" in err and err.count("\n") == 1


def test_compare_reports_no_percentile_below_the_sample_count_analyze_needs():
    from tailrace.analysis.decide.compare import compare_groups

    rng = np.random.default_rng(1)
    row = compare_groups(rng.exponential(10, 200), rng.exponential(10, 200))  # p99 needs 368
    assert row.p50_diff_ms is not None and row.p99_diff_ms is None
    assert "p99 needs ≥ 368 samples per run" in row.notes


def test_tailrace_itself_failing_has_its_own_exit_code(tmp_path, monkeypatch, capsys):
    import tailrace.analysis.analyze_command as report_command

    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(report_command, "analyze_and_report", broken)
    assert cli.main(["analyze", str(tmp_path)]) == exit_codes.INTERNAL == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error (ZeroDivisionError: a bug)" in err
    trace = Path(err.rsplit("traceback is in ", 1)[1].strip())
    assert "ZeroDivisionError" in trace.read_text()
    trace.unlink()


def test_a_gate_that_cannot_be_judged_is_inconclusive_not_a_pass(tmp_path, capsys):
    """Runs too short for a p99 (fewer samples than its interval needs): a p99 gate is not judged, says so, and
    exits INCONCLUSIVE — a regression gate never passes on no evidence."""
    def short(path: Path, seed: int) -> Path:
        write_run(path, profile=profile_dict(10, 20, regions=("r1",)), seed=seed, workers={
            "r1-w0": {"region": "r1", "rate": 10, "duration_s": 20, "latency_ms": 10}})
        return path

    a, b = short(tmp_path / "a", 1), short(tmp_path / "b", 2)
    assert compare_command(a, b, None, fail_if_slower=["p99:5%"]) == exit_codes.INCONCLUSIVE
    err = capsys.readouterr().err
    assert "--fail-if-slower not judged: e1/r1: p99 has no interval (p99 needs ≥ 368 samples per run)" in err
    assert compare_command(a, b, None, fail_if_slower=["p50:5%"]) == exit_codes.PASS


@pytest.mark.parametrize("ties", [False, True])
def test_unpaired_groups_are_tested_on_their_sorted_samples_with_the_same_p_value_to_the_bit(ties):
    """compare_groups hands Mann–Whitney its sorted copies (faster to rank): U and the p-value are those of the
    samples in time order."""
    from scipy import stats

    from tailrace.analysis.decide.compare import compare_groups

    rng = np.random.default_rng(7)
    a, b = rng.lognormal(3, 1, 40_000), rng.lognormal(3.02, 1, 30_000)
    if ties:
        a, b = np.round(a), np.round(b)
    assert compare_groups(a, b).test_p == float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
