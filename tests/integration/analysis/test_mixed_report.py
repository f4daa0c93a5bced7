"""A real run that mixes one-shot KServe endpoints with a streamed LLM endpoint (the demo's mix) from two emulated
regions: the report's numbers checked against each other — every goodput at most its ok rate and equal to it where
every request is ok and far inside every SLO that applies, a stream's goodput the same in the latency and the
tokens table, and the pooled row, curves, timeline and phases each of one kind — and the page rendered in headless
Chromium."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tailrace.analysis.analyze import analyze_run
from tests import ROOT
from tests.integration.endpoints.test_embedded_generative import render_in_chromium
from tests.support import assert_valid, make_profile, run_with

pytestmark = pytest.mark.shares_machine  # functional checks at low rates: may run beside another such test

DURATION_S = 8.0


def test_a_mixed_runs_report_defines_every_number_for_its_endpoints_kind(model_repo, tmp_path):
    # the demo's SLOs: a one-shot p99 goal over every endpoint that a stream's E2E (~0.3 s) would fail by design
    slos = [{"metric": "latency", "percentile": 99, "threshold_ms": 200},
            {"metric": "ttft", "percentile": 90, "threshold_ms": 1000, "endpoint": "llm"},
            {"metric": "tpot", "percentile": 90, "threshold_ms": 100, "endpoint": "llm"}]
    endpoints = [{"name": "mlp", "url": "embedded", "protocol": "kserve-http", "model": "digits_mlp_fp32"},
                 {"name": "llm", "url": "embedded", "protocol": "openai-chat", "model": "synthetic_lm", "weight": 0.5,
                  "prompts": {"input_tokens": {"mean": 32}, "output_tokens": {"mean": 32}, "count": 16}}]
    profile = make_profile(model_repo, endpoints=endpoints, slos=slos,
                           load={"rate": 60, "duration_s": DURATION_S, "warmup_s": 1, "seed": 11})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    a = analyze_run(run.run_dir)
    s = a.summary.to_dict()
    latency = {(r["endpoint"], r["region"]): r for r in s["latency"]}
    tokens = {(r["endpoint"], r["region"]): r for r in s["tokens"]}
    measured = a.requests[a.requests["phase"] > 0]
    assert (measured["status"] == "ok").all()
    e2e_ms = measured.loc[measured["endpoint"] == "llm", "latency_ns"].to_numpy() / 1e6
    one_shot_ms = measured.loc[measured["endpoint"] == "mlp", "latency_ns"].to_numpy() / 1e6
    assert e2e_ms.min() > 200 > one_shot_ms.max()  # the stream fails the one-shot goal by design; mlp far inside it

    for key, row in latency.items():
        ok_rate = row["ok"] / DURATION_S
        assert row["goodput_rps"] <= ok_rate + 1e-9, key
        assert row["goodput_rps"] == pytest.approx(ok_rate), key  # all ok, far inside every SLO that applies
        assert row["kind"] == ("stream" if key[0] == "llm" else "one-shot"), key
    for key in [k for k in latency if k[0] == "llm"]:
        assert latency[key]["goodput_rps"] == tokens[key]["goodput_rps"] > 0, key
    overall = latency[("*", "*")]
    assert overall["count"] == len(one_shot_ms) and overall["max_ms"] == pytest.approx(one_shot_ms.max())
    # the figures' numbers: the region curves, the timeline's p99 line and the phases, each of one kind
    for region, (x, _) in a.cdfs.items():
        assert x.max() < 200 and len(x) == int(((measured["endpoint"] == "mlp") & (measured["region"] == region)).sum())
    from tailrace.analysis.stats.timeline import timeline
    line = timeline(a.requests, {"llm"})
    assert max(np.nanmax(v) for v in line.p99_ms.values()) < 200
    phases = [r for r in s["phases"] if r["phase"] > 0]
    assert {r["kind"] for r in phases} == {"one-shot", "stream"}
    assert all((r["p50_ms"] < 200) == (r["kind"] == "one-shot") for r in phases)
    # the CSV agrees with the summary; the page names the kinds and renders without a script error
    table = a.tables["latency"]
    assert set(table.loc[table["endpoint"] == "llm", "goodput_rps"]) == {tokens[("llm", "near")]["goodput_rps"],
                                                                        tokens[("llm", "far")]["goodput_rps"],
                                                                        tokens[("llm", "*")]["goodput_rps"]}
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "analyze", str(run.run_dir), "--quiet"], cwd=ROOT,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == s["exit_code"], r.stdout + r.stderr  # a verdict (a short run may be INCONCLUSIVE)
    page = Path(run.run_dir) / "report" / "index.html"
    html = page.read_text()
    assert "* (one-shot)" in html and "stream (E2E)" in html and "one-shot endpoints" in html
    render_in_chromium(page, tmp_path)
