"""The report reads itself: each table and plot says what applies and what it means (analysis/report/html.py,
analysis/report/plots.py), terminal tables are wide enough in CI logs (contract/terminal.py), the live table's last
frame keeps the rates (harness/orchestration/progress.py)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
from matplotlib import colormaps

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.report import plots
from tailrace.analysis.report.html import render
from tailrace.analysis.stats.timeline import timeline
from tests.support import profile_dict, write_run


def _analysis(tmp_path):
    profile = profile_dict(100, 20, slos=[{"metric": "latency", "percentile": 99, "threshold_ms": 50,
                                           "endpoint": "*", "region": "*"}])
    write_run(tmp_path, profile=profile, workers={
        "r1-w0": {"region": "r1", "latency_ms": lambda n, rng: rng.lognormal(np.log(5), 0.3, n), "rate": 50,
                  "duration_s": 20, "offset_ms": -40},
        "r2-w0": {"region": "r2", "latency_ms": lambda n, rng: rng.lognormal(np.log(30), 0.3, n), "rate": 50,
                  "duration_s": 20}}, warnings=["a warning the manifest carries"])
    return analyze_run(tmp_path)


def test_heatmap_numbers_are_white_on_dark_cells_and_black_on_light_ones():
    cmap = colormaps["YlOrRd"]
    assert plots._readable_on(cmap(1.0)) == "white" and plots._readable_on(cmap(0.0)) == "black"
    svg = plots.heatmap([(r, "e", v) for r, v in (("slow", 200.0), ("fast", 5.0))], "p99 (ms)")
    assert "fill: #ffffff" in svg  # the slowest cell's number


def test_latency_axes_have_plain_ms_ticks_and_the_throughput_panel_a_legend(tmp_path):
    a = _analysis(tmp_path)
    svg = plots.over_time(a.requests, [], [])
    assert "10^" not in svg and "times 10" not in svg and "×10" not in svg
    assert re.search(r">\s*(5|10|20|50)\s*<", svg)  # plain tick labels
    assert svg.count(">r1<") >= 1 and svg.count(">r2<") >= 1  # throughput legend names the regions


def test_the_page_explains_what_applies(tmp_path):
    a = _analysis(tmp_path)
    page = render(a)
    assert "<th class=''></th>" not in page  # no blank headers
    assert "No server timings" in page  # this synthetic run has none: said, not an empty table
    # stationarity and independence explained; arrivals interpreted
    assert "Are these numbers trustworthy?" in page and "Stationarity." in page and "Independence." in page
    assert "what it means" in page and "Poisson" in page
    # clock sign explained; manifest readable with its warnings and host CPU, raw JSON folded
    assert "the sign is the opposite of the skew" in page
    assert "<details><summary>raw manifest (JSON)</summary>" in page and "a warning the manifest carries" in page
    assert page.index("<h2 id='manifest'>Manifest</h2><table>") > 0
    # one phase naming: the phase table's names are the ones the arrivals table uses
    names = {row["name"] for row in a.summary.to_dict()["phases"]}
    assert {row["phase_name"] for row in a.summary.to_dict()["arrivals"]} <= names


def test_the_queueing_section_shows_only_what_applies():
    from tailrace.analysis.report.html import _queueing_section
    from tailrace.contract.summary import QueueingRow

    ordinary = {"endpoint": "mlp", "model": "digits_mlp", "slots": 1, "arrival_rate": 60.0, "throughput": 60.0,
                "L_measured": 0.02, "lambda_W": 0.02, "littles_gap": 0.0, "mean_service_ms": 0.3, "utilization": 0.02,
                "utilization_flag": False, "mean_queue_ms": 0.01, "p99_queue_ms": 0.05, "arrival_cv2": 1.1, "mm1": None}
    html_text = _queueing_section([QueueingRow.model_validate(ordinary)])
    assert "M/M/1 Wq" not in html_text and "No queueing-model prediction for mlp" in html_text
    assert "<svg" not in html_text and "under 10% utilization" in html_text
    busy = ordinary | {"endpoint": "mm1", "utilization": 0.8, "utilization_flag": True, "mean_queue_ms": 8.0,
                       "mm1": {"mean_wait_ms": 8.0, "service_cv2": 1.0, "pk_mean_wait_ms": 8.0,
                               "gg1_mean_wait_ms": 8.4, "p99_sojourn_ms": 46.0, "measured_p99_sojourn_ms": 47.0}}
    html_text = _queueing_section([QueueingRow.model_validate(q) for q in (ordinary, busy)])
    assert "M/M/1 Wq" in html_text and "<svg" in html_text and "0.80 &gt; 0.7" in html_text


def test_goodput_counts_requests_within_every_latency_slo(tmp_path):
    a = _analysis(tmp_path)
    rows = {(r["endpoint"], r["region"]): r for r in a.summary.to_dict()["latency"]}
    fast, slow = rows[("e1", "r1")], rows[("e1", "r2")]
    assert abs(fast["goodput_rps"] - fast["achieved_rate"]) < 0.5  # ~5 ms, all under 50 ms
    assert slow["goodput_rps"] < slow["achieved_rate"]  # lognormal(30 ms): a few exceed 50 ms
    assert rows[("*", "*")]["goodput_rps"] == fast["goodput_rps"] + slow["goodput_rps"]


def test_terminal_tables_are_wide_when_output_is_not_a_terminal():
    from tailrace.contract.terminal import WIDE, console

    assert console().width >= WIDE  # pytest captures stdout: not a terminal


def test_the_live_tables_last_frame_keeps_each_regions_rate(monkeypatch):
    from tailrace.harness.orchestration import progress

    frames = []
    monkeypatch.setattr(progress.LiveScreen, "show", lambda self, table: frames.append(table))
    clock = iter([100.0, 101.0, 102.0, 103.0, 104.0, 105.0, 106.0, 107.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    answers = iter([{"ok": 100.0, "errors": 0.0, "buckets": {0.05: 100.0}},
                    {"ok": 200.0, "errors": 0.0, "buckets": {0.05: 200.0}}, None])
    monkeypatch.setattr(progress, "scrape", lambda client, port: next(answers))

    class Run:
        run_id, metrics_ports = "r", {"eu-w0": 1}

    p = progress.Progress(quiet=False)
    for _ in range(3):
        p.update(Run())
    rates = [list(t.columns[2].cells)[0] for t in frames]
    assert rates[1] == "100" and rates[2] == "200 mean"  # the worker is gone: the mean, never 0
    assert "p99 ≤" in frames[-1].caption


def test_the_timeline_is_each_regions_per_second_p99_and_counts_as_a_pandas_groupby_computes_them():
    rng = np.random.default_rng(7)
    n = 20_000
    df = pd.DataFrame({"region": pd.Categorical(rng.choice(["eu", "us", "ap"], n), categories=["us", "eu", "ap"]),
                       "t_intended_ref": 5_000_000_000 + np.sort(rng.integers(0, 12_300_000_000, n)),
                       "status": pd.Categorical(rng.choice(["ok", "ok", "ok", "error"], n)),
                       "latency_ns": rng.lognormal(16, 0.6, n).astype(np.int64)})
    df.loc[(df["region"] == "ap") & (df["t_intended_ref"] < 6_000_000_000), "status"] = "error"  # a gap in ap's p99
    line = timeline(df)
    t0 = int(df["t_intended_ref"].min())
    assert line.t0_ns == t0 and line.whole_s == 12 and list(line.p99_ms) == ["us", "eu", "ap"]
    second = (df["t_intended_ref"] - t0) // 1_000_000_000
    inside = df[second < 12].assign(second=second)
    ok = inside[inside["status"] == "ok"]
    for region in ("us", "eu", "ap"):
        expected = ok[ok["region"] == region].groupby("second")["latency_ns"].quantile(0.99) / 1e6
        got = pd.Series(line.p99_ms[region]).dropna()
        pd.testing.assert_series_equal(got, expected.astype(float), check_names=False, check_index_type=False)
        assert line.requests[region].tolist() == inside[inside["region"] == region].groupby("second").size(
        ).reindex(range(12), fill_value=0).tolist()
    assert np.isnan(line.p99_ms["ap"][0])
    failed = inside[inside["status"] != "ok"].groupby("second").size().reindex(range(12), fill_value=0)
    assert line.errors.tolist() == failed.tolist() and line.any_ok


def test_the_heatmaps_n_a_is_explained_only_where_a_cell_shows_it(tmp_path):
    from dataclasses import replace

    a = _analysis(tmp_path)
    note = "n/a: too few independent samples for a p99"
    assert all(r.p99.value is not None for r in a.summary.latency) and note not in render(a)
    cell = next(r for r in a.summary.latency if r.region != "*" and r.endpoint != "*")
    unknown = {**cell.percentiles, "p99": cell.p99.model_copy(update={"value": None})}
    latency = [r.model_copy(update={"percentiles": unknown}) if r is cell else r for r in a.summary.latency]
    assert note in render(replace(a, summary=a.summary.model_copy(update={"latency": latency})))
