"""`tailrace compare`'s energy per request (analysis/decide/energy_compare.py): two run directories with a GPU
monitor's DCGM energy counter, B drawing a quarter more energy per request than A — Δ with its interval over each
phase's equal parts, on the table and in --out; and Welch's interval itself."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tailrace.analysis.decide.compare import compare_command
from tailrace.analysis.decide.energy_compare import compare_energy, welch_difference
from tailrace.contract.layout import RunLayout
from tests.support import BASE_NS, profile_dict, write_run

RATE, SECONDS = 40, 20


def run_with_gpu(run_dir, joules_per_request: float, seed: int):
    profile = profile_dict(RATE, SECONDS, regions=("r1",)) | {
        "monitors": [{"name": "gpu", "url": "http://127.0.0.1:9400/metrics", "interval_s": 0.5}]}
    write_run(run_dir, workers={"w1": {"region": "r1", "rate": RATE, "duration_s": SECONDS, "latency_ms": 5}},
              profile=profile, seed=seed)
    rng = np.random.default_rng(seed)
    path = RunLayout(run_dir).monitor_timeline("gpu")
    path.parent.mkdir(parents=True, exist_ok=True)
    energy_mj, lines = 0.0, []
    for k in range(-4, 2 * SECONDS + 4):  # every 0.5 s, from before the load to after it
        watts = 60.0 + (RATE * joules_per_request * rng.normal(1, 0.05) if 0 <= k < 2 * SECONDS else 0)
        energy_mj += watts * 0.5 * 1e3
        lines.append({"t_ns": BASE_NS + k * 500_000_000,
                      "samples": {'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total{gpu="0"}': energy_mj}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run_dir


def test_b_draws_a_quarter_more_energy_per_request_and_the_interval_says_so(tmp_path, capsys):
    a = run_with_gpu(tmp_path / "a", 2.0, seed=1)
    b = run_with_gpu(tmp_path / "b", 2.5, seed=2)
    [row] = compare_energy(a, b)
    assert (row.monitor, row.endpoint, row.phase, row.basis) == ("gpu", "*", 1, "measured")
    # per request: its share of the idle 60 W too (40 requests a second: 1.5 J), plus what the load drew
    assert row.mean_a_mj == pytest.approx(3500, rel=0.05) and row.mean_b_mj == pytest.approx(4000, rel=0.05)
    assert row.ci_low < 500 < row.ci_high and row.ci_low > 0 and row.windows_a == 10
    assert compare_command(a, b, tmp_path / "out") == 0
    out = capsys.readouterr().out
    assert "energy per request" in out and "+5" in out
    saved = json.loads((tmp_path / "out" / "compare_energy.json").read_text())
    assert saved[0]["diff_mj"] == pytest.approx(row.diff_mj)


def test_welch_needs_three_parts_each():
    assert welch_difference([1.0, 2.0], [3.0, 4.0, 5.0])["diff_mj"] is None
    d = welch_difference([10.0, 11.0, 9.0, 10.0], [12.0, 13.0, 11.0, 12.0])
    assert d["diff_mj"] == 2.0 and d["ci_low"] < 2.0 < d["ci_high"] and d["ci_low"] > 0
