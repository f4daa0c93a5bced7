"""tailrace analyze / compare as a user runs them: exit codes, messages, the report in headless Chromium."""


from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import ROOT
from tests.support import IN_CI, profile_dict, write_run

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)


def test_corrupt_chunks_are_skipped_the_rest_analysed_and_the_run_invalid(tmp_path):
    write_run(tmp_path, profile=profile_dict(100, 10), chunk_rows=100, workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 50, "duration_s": 10},
        "r2-w0": {"region": "r2", "latency_ms": 5, "rate": 50, "duration_s": 10}})
    chunks = sorted(tmp_path.glob("regions/r1/r1-w0/requests-*.parquet"))
    chunks[1].write_bytes(chunks[1].read_bytes()[:200])  # truncated
    (tmp_path / "regions/r2/r2-w0/requests-00099.parquet").write_bytes(b"not parquet at all")
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "analyze", str(tmp_path), "--quiet"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 4, r.stderr  # INVALID: a verdict on what could be read, never a PASS
    assert "requests-00001.parquet" in r.stderr and "requests-00099.parquet" in r.stderr
    assert "Traceback" not in r.stderr
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["input"]["rows_read"] == 1000 - 100
    assert len(summary["input"]["chunks_skipped"]) == 2
    assert not summary["valid"] and summary["verdict"] == "INVALID"
    assert summary["invalid_reasons"] == [f"2 request chunk(s) could not be read ({chunks[1]} and 1 more; the reasons "
                                          "are listed as skipped): their requests are not in these numbers"]
    assert summary["latency"], "the rest is still analysed and reported"


def _slo_run(path: Path, latency, n_rate=100, duration=20, valid=True, errors=0.0, warnings=None):
    slos = [{"metric": "latency", "percentile": 99, "threshold_ms": 50, "endpoint": "*", "region": "*"},
            {"metric": "error_rate", "threshold": 0.01, "endpoint": "*", "region": "*"}]
    write_run(path, profile=profile_dict(n_rate, duration, regions=("r1",), slos=slos), valid=valid, warnings=warnings,
              workers={"r1-w0": {"region": "r1", "latency_ms": latency, "rate": n_rate, "duration_s": duration,
                                 "errors": errors}})


@pytest.mark.parametrize("case,latency,rate,valid,errors,code", [
    ("pass", lambda n, rng: rng.uniform(5, 20, n), 100, True, 0.0, 0),
    ("fail", lambda n, rng: rng.uniform(5, 200, n), 100, True, 0.0, 1),
    ("inconclusive", lambda n, rng: rng.uniform(5, 20, n), 5, True, 0.0, 3),
    ("invalid", lambda n, rng: rng.uniform(5, 20, n), 100, False, 0.0, 4),
    ("error-rate-fail", lambda n, rng: rng.uniform(5, 20, n), 100, True, 0.05, 1),
])
def test_exit_codes_end_to_end(tmp_path, case, latency, rate, valid, errors, code):
    _slo_run(tmp_path, latency, n_rate=rate, valid=valid, errors=errors)
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "analyze", str(tmp_path)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == code, r.stdout + r.stderr
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["exit_code"] == code
    assert (tmp_path / "report" / "tables" / "latency.csv").exists()


def test_refused_requests_without_a_declared_slo_exit_1(tmp_path):
    write_run(tmp_path, profile=profile_dict(100, 10, regions=("r1",)), workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 100, "duration_s": 10, "errors": 0.4}})
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "analyze", str(tmp_path)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error rate ≤ 1% (implicit" in r.stdout and "FAIL" in r.stdout
    assert "(implicit: no error_rate SLO declared)" in (tmp_path / "report" / "index.html").read_text()


def test_a_transient_stall_is_reported_and_leaves_the_verdict_alone(tmp_path):
    stall = "r1-w0: transient stall — send lag p99 7.8 ms > 5 ms in the window 5.0–16.2 s into the run"
    _slo_run(tmp_path, lambda n, rng: rng.uniform(5, 20, n), warnings=[stall])
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "analyze", str(tmp_path)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning" in r.stdout and "transient stall" in r.stdout
    assert json.loads((tmp_path / "report" / "summary.json").read_text())["warnings"] == [stall]
    assert "warning: r1-w0: transient stall" in (tmp_path / "report" / "index.html").read_text()


def test_analyze_unreadable_run_dir_exits_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "analyze", str(tmp_path / "nope")],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "nope" in r.stderr


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_renders_in_headless_chromium(tmp_path):
    browser = chromium()
    if browser is None:
        if IN_CI:
            pytest.fail("chromium must be installed in CI (.ci/run installs Debian's chromium)")
        pytest.skip("chromium not installed")
    run = tmp_path / "run"
    _slo_run(run, lambda n, rng: rng.lognormal(2, 0.5, n))
    subprocess.run([sys.executable, "-m", "tailrace.cli", "analyze", str(run), "--quiet"], cwd=ROOT, timeout=120)
    page = run / "report" / "index.html"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
             "--no-first-run", "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'ud'}",
             "--enable-logging=stderr", "--v=0"]
    shot = subprocess.run([browser, *flags, f"--screenshot={tmp_path / 'report.png'}", "--window-size=1200,3000",
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert (tmp_path / "report.png").stat().st_size > 20_000, shot.stderr[-2000:]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert 'data-rendered="' in dom.stdout  # our script ran: the page loaded without a script error
    console_errors = [line for line in (shot.stderr + dom.stderr).splitlines()
                      if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]
    assert not console_errors, console_errors
    assert "id=\"verdict\"" in dom.stdout and "PASS" in dom.stdout


def test_compare_finds_the_slower_endpoint_and_no_difference_elsewhere(tmp_path):
    from tailrace.analysis.decide.compare import compare_runs

    def run(path, slow_factor, seed):
        write_run(path, profile=profile_dict(200, 20, regions=("r1",), endpoints=("e1", "e2")), seed=seed, workers={
            "r1-w0": {"region": "r1", "endpoint": "e1", "rate": 100, "duration_s": 20,
                      "latency_ms": lambda n, rng: rng.lognormal(np.log(10 * slow_factor), 0.3, n)},
            "r1-w1": {"region": "r1", "endpoint": "e2", "rate": 100, "duration_s": 20,
                      "latency_ms": lambda n, rng: rng.lognormal(np.log(10), 0.3, n)}})

    run(tmp_path / "a", 1.0, seed=1)
    run(tmp_path / "b", 1.3, seed=2)
    rows = {r.endpoint: r for r in compare_runs(tmp_path / "a", tmp_path / "b")}
    slower, same = rows["e1"], rows["e2"]
    assert slower.verdict == "B slower" and slower.p50_ci_low > 0 and slower.cohens_d > 0.5
    assert 2.0 < slower.p50_diff_ms < 4.0  # true difference 3 ms
    assert same.verdict == "no significant difference" and same.p50_ci_low < 0 < same.p50_ci_high
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "compare", str(tmp_path / "a"), str(tmp_path / "b"),
                        "--out", str(tmp_path / "cmp")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and (tmp_path / "cmp" / "compare.csv").exists()




def test_runs_with_one_schedule_are_compared_pair_by_pair_and_pairing_narrows_the_interval(tmp_path):
    from tailrace.analysis.decide.compare import compare_runs

    def run(path, slow_factor, seed=3):
        # one seed: the same schedule and the same draws — B's e1 requests are A's, 5% slower (common random numbers)
        write_run(path, profile=profile_dict(200, 20, regions=("r1",), endpoints=("e1", "e2")), seed=seed, workers={
            "r1-w0": {"region": "r1", "endpoint": "e1", "rate": 100, "duration_s": 20,
                      "latency_ms": lambda n, rng: rng.lognormal(np.log(10), 0.5, n) * slow_factor},
            "r1-w1": {"region": "r1", "endpoint": "e2", "rate": 100, "duration_s": 20,
                      "latency_ms": lambda n, rng: rng.lognormal(np.log(10), 0.5, n)}})

    run(tmp_path / "a", 1.0)
    run(tmp_path / "b", 1.05)
    paired = {r.endpoint: r for r in compare_runs(tmp_path / "a", tmp_path / "b")}
    unpaired = {r.endpoint: r for r in compare_runs(tmp_path / "a", tmp_path / "b", paired=False)}
    assert paired["e1"].paired and not unpaired["e1"].paired
    width = {k: rows["e1"].p99_ci_high - rows["e1"].p99_ci_low for k, rows in (("paired", paired),
                                                                                    ("unpaired", unpaired))}
    print(f"5% slower p99: paired CI width {width['paired']:.3f} ms, unpaired {width['unpaired']:.3f} ms")
    assert paired["e1"].p99_ci_low > 0 and unpaired["e1"].p99_ci_low < 0 < unpaired["e1"].p99_ci_high
    assert paired["e1"].verdict == "B slower" and paired["e2"].verdict == "no significant difference"
    run(tmp_path / "c", 1.0, seed=4)  # another seed: another schedule
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "compare", str(tmp_path / "a"), str(tmp_path / "c"),
                        "--pairing", "paired"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "cannot be paired" in r.stderr and "Traceback" not in r.stderr
