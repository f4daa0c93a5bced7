"""Traffic like production, sent for real from 2 emulated regions on the embedded endpoint: gamma, constant and
on/off processes delivered as asked (the report's checks on the merged sends and on each worker's share), traces in
the three formats replayed at 2× with every row sent within the generator's send lag of its scaled instant, token
lengths from the trace on a generative endpoint, and a bad trace refused before anything is sent."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tailrace.analysis.analyze import analyze_run
from tests import ROOT
from tests.support import assert_valid, make_profile, run_with

REGIONS = [{"name": "near", "share": 0.5, "delay_ms": 2}, {"name": "far", "share": 0.5, "delay_ms": 10}]
SEND_LAG_MS = 5.0  # the generator's own bound (generator.send_lag_p99_ms): a trace row sent later is a late row


@pytest.mark.parametrize("arrivals, rate, duration", [
    ({"process": "gamma", "cv": 2.0}, 150, 10),
    ({"process": "constant"}, 150, 6),
    ({"process": "onoff", "on_rate": 400, "off_rate": 40, "on_s": 0.3, "off_s": 0.6}, None, 20),
], ids=["gamma", "constant", "onoff"])
def test_a_process_from_two_regions_is_delivered_as_asked(model_repo, tmp_path, arrivals, rate, duration):
    load = {"duration_s": duration, "warmup_s": 1, "seed": 21, "arrivals": arrivals} | ({"rate": rate} if rate else {})
    run, manifest = run_with(make_profile(model_repo, regions=REGIONS, load=load), tmp_path)
    assert_valid(manifest)
    summary = analyze_run(run.run_dir).summary.to_dict()
    rows = summary["arrival_process"]
    merged = [r for r in rows if r["source"] == "merged"]
    assert merged and all(r["ok"] for r in merged), merged
    workers = [r for r in rows if r["source"] != "merged"]
    assert len(workers) == 2 and all(r["ok"] is not False for r in workers), workers
    assert summary["arrivals"] == [] and not any("arrivals, phase" in w for w in summary["warnings"])
    if arrivals["process"] == "gamma":  # each region's half of a cv-2 process: c² = 0.5·(4 − 1) + 1
        assert all(abs(r["process_cv"] - 2.5 ** 0.5) < 1e-9 for r in workers)
        assert merged[0]["ci_low"] < 2.0 < merged[0]["ci_high"] * 1.05
    page = (Path(run.run_dir) / "report" / "index.html")
    if page.exists():
        assert f"Was the load the {arrivals['process']} process asked for?" in page.read_text()


def _trace(tmp_path: Path, fmt: str, n: int = 120) -> tuple[Path, np.ndarray]:
    """A small trace in `fmt` (seconds from its first row returned): ~15 rows a second with a burst."""
    rng = np.random.default_rng(4)
    t = np.cumsum(rng.exponential(1 / 15, n))
    t[40:60] = t[40] + np.arange(20) * 0.005  # a burst: 20 rows 5 ms apart
    t[60:] += t[59] - t[60] + 0.1
    t = np.round(t - t[0], 6)
    inputs, outputs = rng.integers(8, 40, n), rng.integers(2, 9, n)
    if fmt == "csv":
        text = "timestamp,region\n" + "".join(f"{x},{('near', 'far')[i % 3 == 0]}\n" for i, x in enumerate(t))
    elif fmt == "azure":
        base = np.datetime64("2023-11-16T18:15:46.000000")
        text = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
            f"{str(base + np.timedelta64(int(x * 1e6), 'us')).replace('T', ' ')}0,{i},{o}\n"
            for x, i, o in zip(t, inputs, outputs))
    else:
        text = "".join(json.dumps({"timestamp": int(round(x * 1000)), "input_length": int(i), "output_length": int(o),
                                   "hash_ids": [1, 2]}) + "\n" for x, i, o in zip(t, inputs, outputs))
        t = np.round(t * 1000) / 1000
    path = tmp_path / f"trace.{'jsonl' if fmt == 'mooncake' else 'csv'}"
    path.write_text(text)
    return path, t


def start_uncertainty_s(run_dir: Path) -> float:
    """How far apart two workers' start instants may be: each set its start from its first clock sample, off by at
    most half that sample's round trip, so two are within the sum of the two largest halves."""
    halves = []
    for worker in run_dir.glob("regions/*/*/"):
        samples = [pq.read_table(f, columns=["delay_ns", "stage"]).to_pylist() for f in worker.glob("clock-*.parquet")]
        halves += [row["delay_ns"] / 2e9 for rows in samples for row in rows if row["stage"] == "before"]
    return sum(sorted(halves)[-2:])


# the Azure format's reading is a unit test's (tests/unit/harness/worker/test_arrival_processes.py): one run each for a one-shot
# endpoint (CSV, its region column) and a generative one (Mooncake, its token lengths)
@pytest.mark.parametrize("fmt", ["csv", "mooncake"])
def test_a_trace_replayed_at_twice_the_speed_sends_every_row_on_time(model_repo, tmp_path, fmt):
    path, t = _trace(tmp_path, fmt)
    generative = fmt != "csv"  # the LLM traces' token lengths drive the prompts and max_tokens
    endpoints = [{"name": "llm", "url": "embedded", "protocol": "openai-completions", "model": "synthetic_lm",
                  "timeout_ms": 20000}] if generative else None
    load = {"duration_s": float(t[-1] / 2 + 1), "warmup_s": 0, "seed": 3,
            "arrivals": {"process": "trace", "trace": {"file": str(path), "time_scale": 2}}}
    profile = make_profile(model_repo, regions=REGIONS, load=load, generator={"send_lag_p99_ms": SEND_LAG_MS},
                           **({"endpoints": endpoints} if endpoints else {}))
    run, manifest = run_with(profile, tmp_path / "run")
    assert_valid(manifest)
    a = analyze_run(run.run_dir)
    df = a.requests.sort_values("t_intended_ref")
    assert len(df) == len(t)  # every row, once
    start = df["t_intended_ref"].min()
    scheduled = (df["t_intended_ref"].to_numpy() - start) / 1e9
    # the scaled instants, each worker's from the start instant as its clock put it: within the bound its first
    # clock sample gave (half its round trip; 1–7.6 ms on a loaded machine). Sorting moves no value further than
    # the largest shift, so the sorted instants stay within the bound too.
    assert np.allclose(scheduled, t / 2, atol=0.0005 + start_uncertainty_s(Path(run.run_dir)))
    # VALID (above): the generator's own windows kept their send-lag p99 under SEND_LAG_MS — that is the bound; the
    # typical row is well inside it (no wall-clock bound on the worst row: a loaded machine's scheduler decides it)
    assert np.median(df["send_lag_ns"]) / 1e6 < SEND_LAG_MS
    merged = next(r for r in a.summary.to_dict()["arrival_process"] if r["source"] == "merged")
    assert sum(merged["per_second"]["trace"]) == len(t) and merged["lag_max_ms"] < SEND_LAG_MS * 4
    if fmt == "csv":  # the trace's region column sends each row from its region
        expected = np.array([("near", "far")[i % 3 == 0] for i in range(len(t))])
        assert (df["region"].astype(str).to_numpy() == expected).all()
    else:
        ok = df[df["status"] == "ok"]
        assert (ok["status"] == "ok").all() and len(ok) == len(t), df["error"].unique()
        lengths = {int(x) for x in ok["output_tokens"]}
        assert lengths <= set(range(2, 9)) and len(lengths) > 3  # each row's own max_tokens


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_bad_trace_is_one_line_naming_its_row_and_nothing_is_sent(model_repo, tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text("timestamp\n0.0\n0.5\n0.25\n")
    profile = tmp_path / "p.toml"
    profile.write_text(f"""name = "bad-trace"
[[endpoints]]
name = "e"
url = "embedded"
protocol = "kserve-http"
model = "digits_mlp_fp32"
[[regions]]
name = "r"
share = 1.0
[load]
duration_s = 5
arrivals = {{ process = "trace", trace = {{ file = "{trace}" }} }}
[embedded]
models_dir = "{model_repo}"
""")
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(profile), "--out", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{trace}:4: timestamp 0.25 is earlier than the row before it" in r.stderr and "Traceback" not in r.stderr
    assert not list((tmp_path / "runs").glob("*/regions/*/*/requests-*"))
