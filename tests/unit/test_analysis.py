"""Analysis: statistics, clock correction, corrupt chunks, SLO verdicts, exit codes, the report in a browser."""


from __future__ import annotations

import shutil

import numpy as np
import pytest
from scipy import stats as sps

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.read.clock_correction import fit_all
from tailrace.analysis.read.rundir import RunDirError, load_run
from tailrace.analysis.stats.estimators import cohens_d, min_samples_for, percentile_ci, proportion_verdict
from tests.support import profile_dict, write_run


@pytest.mark.parametrize("n", [400, 1000, 3001])
@pytest.mark.parametrize("p", [50, 90, 95, 99])
def test_percentile_is_numpys(n, p):
    x = np.random.default_rng(n).exponential(3.0, n)
    assert percentile_ci(x, p).value == np.percentile(x, p)


def test_p99_ci_coverage_at_95_nominal():
    rng = np.random.default_rng(7)
    true_p99 = float(np.exp(sps.norm.ppf(0.99)))  # lognormal(0, 1)
    hits = 0
    for _ in range(200):
        est = percentile_ci(rng.lognormal(0, 1, 2000), 99)
        hits += est.ci_low <= true_p99 <= est.ci_high
    assert hits / 200 >= 0.93, hits


def test_percentile_not_reported_below_min_samples():
    est = percentile_ci(np.arange(1000.0), 99.9)
    assert est.value is None and est.min_samples == min_samples_for(0.999) == 3688
    assert "p99.9 needs ≥ 3688 samples" == est.as_dict()["note"]


@pytest.mark.parametrize("k,n,bound,verdict", [(10, 5000, 0.01, "PASS"), (120, 5000, 0.01, "FAIL"),
                                               (52, 5000, 0.01, "INCONCLUSIVE"), (0, 100, 0.01, "INCONCLUSIVE"),
                                               (0, 1000, 0.01, "PASS"), (3, 100, 0.001, "FAIL")])
def test_proportion_verdicts(k, n, bound, verdict):
    v = proportion_verdict(k, n, bound)
    assert v.verdict == verdict
    if verdict == "INCONCLUSIVE":
        assert v.more_samples_needed and v.more_samples_needed > 0
        # the promised sample count does decide it when the observed proportion holds
        m = n + v.more_samples_needed
        assert proportion_verdict(round(k / n * m), m, bound).verdict != "INCONCLUSIVE"


def test_cohens_d_sign_and_size():
    rng = np.random.default_rng(0)
    a, b = rng.normal(10, 1, 5000), rng.normal(11, 1, 5000)
    assert 0.9 < cohens_d(a, b) < 1.1


def test_skewed_clocks_merged_into_one_timeline(tmp_path):
    """Two workers with clocks ±50 ms off: offsets recovered within 1 ms, the order of events restored."""
    profile = profile_dict(100, 20)
    truth = write_run(tmp_path, profile=profile, workers={
        "r1-w0": {"region": "r1", "offset_ms": -50, "latency_ms": 5, "rate": 50, "duration_s": 20},
        "r2-w0": {"region": "r2", "offset_ms": +50, "latency_ms": 5, "rate": 50, "duration_s": 20}})
    data = load_run(tmp_path)
    models = fit_all(data.clock)
    assert abs(models["r1-w0"].intercept_ns / 1e6 + 50) < 1
    assert abs(models["r2-w0"].intercept_ns / 1e6 - 50) < 1
    a = analyze_run(tmp_path)
    df = a.requests
    true = df["trace_id"].map(truth).to_numpy()
    assert np.max(np.abs(df["t_intended_ref"].to_numpy() - true)) < 1e6  # within 1 ms
    by_truth = np.argsort(true, kind="stable")
    true_gap = np.diff(true[by_truth])
    resolvable = true_gap > 1e6  # events further apart than the clock uncertainty bound (1 ms)
    raw = df["t_intended"].to_numpy()[by_truth]
    ref = df["t_intended_ref"].to_numpy()[by_truth]
    assert (np.diff(raw)[resolvable] < 0).sum() > 50  # the ±50 ms skew misorders many events ...
    assert (np.diff(ref)[resolvable] > 0).all()  # ... and the correction restores their order


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _requests(statuses: list[str], endpoint: str = "a", gap_ns: int = 100_000_000):
    import pandas as pd

    n = len(statuses)
    return pd.DataFrame({"endpoint": endpoint, "t_intended_ref": np.arange(n, dtype=np.int64) * gap_ns,
                         "status": statuses, "code": ["c"] * n, "region": ["r"] * n,
                         "trace_id": [f"{i:032x}" for i in range(n)]})


def test_outage_windows_runs_of_failures_merged_across_a_stray_success():
    from tailrace.analysis.stats.outages import outage_windows

    # 0.1 s apart: 7 failures, 1 stray success, 6 failures (one outage), 20 ok, 3 failures (too few), 6 failures
    statuses = ["ok"] * 10 + ["connection"] * 7 + ["ok"] + ["http_error"] * 6 + ["ok"] * 20 + ["timeout"] * 3 + \
        ["ok"] * 20 + ["connection"] * 6
    windows = outage_windows(_requests(statuses))
    assert len(windows) == 2
    first, last = windows
    assert (first["failed"], first["succeeded"], first["start_s"], first["end_s"]) == (13, 1, 1.0, 2.4)
    assert first["errors"] == {"connection/c": 7, "http_error/c": 6} and first["recovered"]
    assert last["end_s"] is None and not last["recovered"] and last["failed"] == 6
    assert outage_windows(_requests(["ok"] * 50)) == []


def _server_side(rate: float, seconds: float, compute_ms: float, seed: int = 1):
    import pandas as pd

    rng = np.random.default_rng(seed)
    receive = np.cumsum(rng.exponential(1e9 / rate, int(rate * seconds))).astype(np.int64) + 10**18
    compute = np.full(len(receive), int(compute_ms * 1e6))
    return pd.DataFrame({"endpoint": "e", "model": "m", "status": "ok", "server_receive_ns": receive,
                         "server_send_ns": receive + compute + 50_000, "server_compute_ns": compute,
                         "server_queue_ns": 10_000})


def test_queueing_holds_at_most_two_server_columns_and_gives_the_numbers_of_holding_all_four():
    """A day's run cannot hold four server columns of a hundred million rows beside the rest: queueing_table asks
    for receive and send, then compute, then queue, and says when each is read no more; its numbers (M/M/1 rows
    included) are those of reading them from the frame."""
    from tailrace.analysis.stats.queueing import SERVER_COLUMNS, queueing_table

    df = _server_side(400, 20, 2.0)
    df["model"] = "synthetic_mm1"
    loaded, most, calls = set(), 0, []

    def column(name):
        nonlocal most
        loaded.add(name)
        most = max(most, len(loaded))
        calls.append(name)
        return df[name].to_numpy()

    def done(name):
        loaded.discard(name)
        calls.append("done " + name)

    streamed = queueing_table(df[["endpoint", "model", "status", "server_receive_ns"]], {}, {"synthetic_mm1"},
                              column=column, done=done)
    assert streamed == queueing_table(df, {}, {"synthetic_mm1"}) and "mm1" in streamed[0]
    assert most == 2 and not loaded and [c for c in calls if not c.startswith("done")] == list(SERVER_COLUMNS)


def test_utilization_counts_a_batch_execution_once():
    """With dynamic batching each request reports its batch's compute: 400/s × 2 ms is ρ = 0.8 unbatched, but
    at 4 requests per execution the slot is busy only a fifth of the time."""
    from tailrace.analysis.read.triton_stats import requests_per_execution
    from tailrace.analysis.stats.queueing import queueing_table

    df = _server_side(400, 20, 2.0)
    unbatched = queueing_table(df, {}, set())[0]
    assert unbatched["utilization"] == pytest.approx(0.8, rel=0.05) and unbatched["requests_per_execution"] == 1
    per_exec = requests_per_execution([{"endpoints": ["e"], "success": 8000, "execution_count": 2000}])
    batched = queueing_table(df, {}, set(), per_exec)[0]
    assert per_exec == {"e": 4.0}
    assert batched["utilization"] == pytest.approx(unbatched["utilization"] / 4)
    # requests of 128 samples each, one execution per request: no correction
    assert requests_per_execution([{"endpoints": ["e"], "success": 50, "execution_count": 50,
                                    "inference_count": 6400}]) == {"e": 1.0}


def test_pollaczek_khinchine_is_mm1_for_exponential_service_and_half_for_deterministic():
    from tailrace.analysis.stats.queueing import mg1_mean_wait, mm1

    lam, s = 800.0, 0.001
    assert mg1_mean_wait(lam, s, 2 * s ** 2) == pytest.approx(mm1(lam, s)["mean_wait_s"])
    assert mg1_mean_wait(lam, s, s ** 2) == pytest.approx(mm1(lam, s)["mean_wait_s"] / 2)  # M/D/1
    assert mg1_mean_wait(1000.0, s, 2 * s ** 2) == float("inf")


def test_allen_cunneen_is_pollaczek_khinchine_for_poisson_arrivals_and_grows_with_burstiness():
    from tailrace.analysis.stats.queueing import gg1_mean_wait, interarrival_cv2, mg1_mean_wait

    lam, s = 400.0, 0.002
    for cs2 in (0.0, 1.0, 1.5):
        assert gg1_mean_wait(lam, s, 1.0, cs2) == pytest.approx(mg1_mean_wait(lam, s, (cs2 + 1) * s ** 2))
    assert gg1_mean_wait(lam, s, 1.4, 1.0) == pytest.approx(1.2 * gg1_mean_wait(lam, s, 1.0, 1.0))
    assert gg1_mean_wait(600.0, s, 1.0, 1.0) == float("inf")
    rng = np.random.default_rng(1)
    poisson = np.cumsum(rng.exponential(2.5e6, 200_000)).astype(np.int64)
    assert interarrival_cv2(poisson) == pytest.approx(1.0, abs=0.02)
    assert interarrival_cv2(np.arange(0, 10**9, 10**6)) == pytest.approx(0.0)  # a metronome
    # the same arrivals delivered in pairs (two per wake-up of a busy server): burstier
    assert interarrival_cv2(poisson[1::2].repeat(2)) > 1.9
    assert interarrival_cv2(np.array([5])) is None


def test_a_percentile_that_reaches_the_errors_is_infinite_not_nan():
    from tailrace.analysis.stats.estimators import percentile_ci

    ok = np.linspace(1.0, 100.0, 990)
    with_errors = np.concatenate([ok, np.full(10, np.inf)])  # 1% errors: infinitely slow
    assert percentile_ci(with_errors, 99.5).value == float("inf")
    assert percentile_ci(np.concatenate([ok, np.full(20, np.inf)]), 99).value == float("inf")
    # below the errors, numpy's own linear percentile (type 7), unchanged
    assert percentile_ci(with_errors, 50).value == np.percentile(with_errors[:-10].tolist() + [1e9] * 10, 50)
    assert percentile_ci(with_errors, 98.9).value == np.percentile(with_errors[:-10].tolist() + [1e9] * 10, 98.9)
    assert percentile_ci(ok, 99).value == np.percentile(ok, 99)


def _two_regions(tmp_path, slos=None):
    profile = profile_dict(100, 20, slos=slos or [{"metric": "latency", "percentile": 50, "threshold_ms": 50,
                                                   "endpoint": "*", "region": "*"}])
    write_run(tmp_path, profile=profile, workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 50, "duration_s": 20}})  # r2 sent nothing
    return profile


def test_a_region_that_sent_nothing_is_in_the_verdict_not_missing(tmp_path):
    _two_regions(tmp_path)
    s = analyze_run(tmp_path).summary
    by_region = {v["region"]: v for v in s["slos"]}
    assert by_region["r1"]["verdict"] == "PASS"
    assert by_region["r2"]["n"] == 0 and by_region["r2"]["verdict"] == "INCONCLUSIVE"
    assert s["verdict"] == "INCONCLUSIVE"


def test_a_chunk_with_a_wrongly_typed_column_is_skipped_with_its_reason(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    _two_regions(tmp_path)
    chunk = sorted(tmp_path.glob("regions/r1/r1-w0/requests-*.parquet"))[0]
    table = pq.read_table(chunk)
    bad = table.set_column(table.schema.get_field_index("latency_ns"), "latency_ns",
                           pa.array([str(v) for v in table.column("latency_ns").to_pylist()]))
    pq.write_table(bad, chunk.with_name("requests-00999.parquet"))
    s = analyze_run(tmp_path).summary
    (skipped,) = s["input"]["chunks_skipped"]
    assert skipped["path"].endswith("requests-00999.parquet")
    assert skipped["reason"] == "column latency_ns is string, expected int64"
    assert s["input"]["rows_read"] == 1000


def test_a_worker_without_clock_samples_is_named_in_a_warning(tmp_path):
    _two_regions(tmp_path)
    for f in tmp_path.glob("regions/r1/r1-w0/clock-*.parquet"):
        f.unlink()
    s = analyze_run(tmp_path).summary
    assert any(w.startswith("r1-w0: no clock samples") for w in s["warnings"]), s["warnings"]


def test_a_run_directory_without_manifest_is_refused(tmp_path):
    _two_regions(tmp_path)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(RunDirError, match="no manifest.json"):
        load_run(tmp_path)


def test_a_run_in_which_every_request_failed_gets_its_full_report(tmp_path):
    from tailrace.analysis.report.html import render

    profile = profile_dict(100, 10, slos=[{"metric": "latency", "percentile": 99, "threshold_ms": 50,
                                           "endpoint": "*", "region": "*"}])
    write_run(tmp_path, profile=profile, workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 50, "duration_s": 10, "errors": 1.0},
        "r2-w0": {"region": "r2", "latency_ms": 5, "rate": 50, "duration_s": 10, "errors": 1.0}})
    a = analyze_run(tmp_path)
    assert a.summary["verdict"] == "FAIL" and a.summary["errors"][0]["count"] == 1000
    page = render(a)
    assert "no successful request" in page and page.index("<h2>Errors</h2>") < page.index("<h2>SLO verdicts</h2>")


def test_order_statistic_bootstrap_matches_resampling():
    """bootstrap_percentiles draws a percentile's bootstrap replicates without resampling: their distribution is
    the resampling bootstrap's (two-sample KS on 4,000 replicates each, for a median and a tail percentile)."""
    from scipy import stats as sps

    from tailrace.analysis.stats.estimators import bootstrap_percentiles

    rng = np.random.default_rng(11)
    x = np.sort(rng.lognormal(0, 1, 400))
    resamples = x[np.random.default_rng(2).integers(0, len(x), size=(4000, len(x)))]
    for p in (50, 99):
        fast = bootstrap_percentiles(x, p, 4000, np.random.default_rng(1))
        assert sps.ks_2samp(fast, np.percentile(resamples, p, axis=1)).pvalue > 0.01, p
    shifted = bootstrap_percentiles(np.sort(x * 1.1), 50, 4000, np.random.default_rng(1))
    assert sps.ks_2samp(shifted, np.percentile(resamples, 50, axis=1)).pvalue < 1e-6  # it tells a 10% shift


def test_a_run_too_large_for_this_machine_is_refused_before_reading(tmp_path, monkeypatch, capsys):
    """The analysis would need more memory than is available: exit 2 naming the rows and the memory, no report
    written, the run directory untouched — never the kernel killing the analysis half-way."""
    import tailrace.analysis.read.rundir as rundir
    from tailrace.analysis.command import analyze_and_report
    from tailrace.analysis.decide.compare import compare_command

    write_run(tmp_path, profile=profile_dict(100, 2), workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 100, "duration_s": 2}})
    before = sorted(p.name for p in tmp_path.rglob("*"))
    monkeypatch.setattr(rundir, "_available_bytes", lambda: 10_000)
    assert analyze_and_report(tmp_path, None, quiet=True) == 2
    err = capsys.readouterr().err
    assert "200 request rows need about" in err and "GiB available" in err and "Traceback" not in err
    assert compare_command(tmp_path, tmp_path, None) == 2
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    monkeypatch.setattr(rundir, "_available_bytes", lambda: 2**40)
    assert analyze_and_report(tmp_path, None, quiet=True) == 0


def test_a_long_run_returns_freed_memory_and_is_sized_for_it(tmp_path, monkeypatch, capsys):
    """A run whose analysis is expected to need more than KEEP_FREED_UP_TO_BYTES returns freed memory to the
    system, and is checked against the memory it needs that way (a day's 100 M rows: ~9 GiB, not 22)."""
    import tailrace.analysis.read.process_memory as process_memory
    import tailrace.analysis.read.rundir as rundir
    from tailrace.analysis.command import analyze_and_report

    write_run(tmp_path, profile=profile_dict(100, 2), workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 100, "duration_s": 2}})
    returned = []
    monkeypatch.setattr(process_memory, "return_freed_memory", lambda: returned.append(True) or {})
    monkeypatch.setattr(rundir, "_available_bytes", lambda: 10_000)
    monkeypatch.setattr(rundir, "request_rows", lambda run_dirs: 100_000_000)
    heaps: list[bool] = []  # one heap for every thread, or (a run that returns memory) glibc's heap per thread
    monkeypatch.setattr(process_memory, "reuse_freed_memory", lambda one_heap=True: heaps.append(one_heap) or {})
    assert analyze_and_report(tmp_path, None, quiet=True, exits=True) == 2
    assert returned == [True] and heaps == [False]
    assert "100,000,000 request rows need about 8.8 GiB" in capsys.readouterr().err
    monkeypatch.setattr(rundir, "request_rows", lambda run_dirs: 200)
    returned.clear()
    heaps.clear()
    assert analyze_and_report(tmp_path, None, quiet=True, exits=True) == 2 and returned == [] and heaps == [True]
    assert "200 request rows need about 0.0 GiB" in capsys.readouterr().err


def test_frames_take_rows_like_pandas_without_its_copies():
    """take_rows / take / as_slice give what pandas' boolean indexing gives, for scattered and contiguous rows."""
    import pandas as pd

    from tailrace.analysis.read.frames import as_slice, frame_of, take, take_rows

    rng = np.random.default_rng(4)
    n = 5000
    df = frame_of({"a": np.arange(n), "c": pd.Categorical(rng.choice(["x", "y", "z"], n)), "f": rng.random(n),
                   "s": pd.array([f"t{i}" for i in range(n)], dtype="str")})
    for mask in (rng.random(n) < 0.3, np.arange(n) % 1000 > 10, np.zeros(n, bool), np.ones(n, bool)):
        assert take_rows(df, mask).equals(df[mask])
        assert np.array_equal(take(df["f"].to_numpy(), np.flatnonzero(mask)), df["f"].to_numpy()[mask])
    assert as_slice(np.arange(10, 20)) == slice(10, 20)
    assert isinstance(as_slice(np.array([1, 2, 4])), np.ndarray)


def test_group_positions_are_pandas_groupby_indices():
    """group_positions (a counting sort of combined codes) gives pandas' groupby(observed=True).indices: the
    same keys (categoricals with missing values, negative and wide integers, booleans, floats) and the same
    ascending positions, in the order pandas sorts the groups."""
    import pandas as pd

    from tailrace.analysis.read import frames
    from tailrace.analysis.read.frames import frame_of, group_positions

    rng = np.random.default_rng(7)
    n = 20_000
    df = frame_of({"c": pd.Categorical.from_codes(rng.integers(-1, 3, n), ["b", "a", "c"]),
                   "p": rng.integers(-2, 4, n).astype(np.int32), "w": rng.integers(0, 70_000, n),
                   "b": rng.random(n) < 0.3, "f": rng.integers(0, 4, n) / 2})
    small, scan = frames.MAX_GROUP_CODES, frames.SCAN_GROUPS
    try:
        for frames.SCAN_GROUPS in (scan, 0, 10**6):  # a few groups scanned, the rest sorted; all sorted; all scanned
            for keys in (["c"], ["p"], ["c", "p"], ["p", "c", "b"], ["f"], ["c", "w"], ["w"]):
                want = df.groupby(keys if len(keys) > 1 else keys[0], observed=True).indices
                got = group_positions(df, keys)
                assert list(got) == list(df.groupby(keys if len(keys) > 1 else keys[0], observed=True).size().index)
                assert all(np.array_equal(got[k], want[k]) for k in want), (keys, frames.SCAN_GROUPS)
                assert sum(len(v) for v in got.values()) == sum(len(v) for v in want.values()), keys
        frames.SCAN_GROUPS = scan
        frames.MAX_GROUP_CODES = 4  # beyond MAX_GROUP_CODES combinations pandas groups: the same answer
        got = group_positions(df, ["c", "p"])
        assert all(np.array_equal(got[k], v) for k, v in df.groupby(["c", "p"], observed=True).indices.items())
    finally:
        frames.MAX_GROUP_CODES, frames.SCAN_GROUPS = small, scan


def test_the_slowest_rows_are_pandas_nlargest_with_its_ties_and_nans():
    """largest_positions picks the rows pandas' Series.nlargest (keep="first") picks, in its order: largest first,
    equal values in row order, NaN last — for integer and float values, k above and below the rows' count."""
    import pandas as pd

    from tailrace.analysis.read.frames import largest_positions

    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(0, 400))
        values = rng.integers(0, int(rng.integers(1, 30)), n)  # few distinct values: many ties
        if trial % 3 == 1:
            values = values.astype(float)
            values[rng.random(n) < 0.2] = np.nan
        mask = rng.random(n) < 0.7
        k = int(rng.integers(0, 40))
        want = pd.Series(values)[mask].nlargest(k).index.to_numpy()
        got = largest_positions(values, np.flatnonzero(mask).astype(np.int32 if trial % 2 else np.int64), k)
        assert np.array_equal(want, got), trial


def test_an_endpoints_latency_rows_are_the_union_of_its_groups_rows():
    """row_positions finds an endpoint's rows by its code: the same ascending positions as its endpoint × region
    groups' sorted together, of all rows and of some (`among`), categorical or not."""
    import pandas as pd

    from tailrace.analysis.read.frames import frame_of
    from tailrace.analysis.stats.latency import row_positions

    rng = np.random.default_rng(11)
    n = 30_000
    endpoints, regions = rng.choice(["b", "a", "c"], n), rng.choice(["r2", "r1"], n)
    for df in (frame_of({"endpoint": pd.Categorical(endpoints, ["c", "a", "b"]), "region": pd.Categorical(regions)}),
               frame_of({"endpoint": endpoints, "region": regions})):
        for among in (None, np.flatnonzero(rng.random(n) < 0.6).astype(np.int32)):
            rows = np.arange(n) if among is None else among
            for labels, positions in row_positions(df, among=among):
                e, r = labels["endpoint"], labels["region"]
                want = rows[((endpoints[rows] == e) | (e == "*")) & ((regions[rows] == r) | (r == "*"))]
                got = positions()
                assert np.array_equal(got, want) and got.dtype == rows.dtype, labels


def test_an_endpoints_and_the_overall_counts_added_up_from_their_groups_are_counted_from_their_rows():
    """request_count_table adds an endpoint's and the overall row up from their endpoint × region groups (exact
    integer sums, the send lag's p99 from each group's largest lags): the same numbers, to the last bit, as numpy
    gives from each row's own positions — with and without `among`, accuracy by count or by the
    correct column, rows with no region or no endpoint (counted from their rows), empty groups."""
    import pandas as pd

    from tailrace.analysis.read.frames import endpoint_region_positions, frame_of
    from tailrace.analysis.stats.latency import _Rows, request_count_table, row_positions

    def counted(rows: _Rows, idx: np.ndarray) -> dict:  # each row's numbers as numpy gives them from its own rows
        ok = rows.ok[idx]
        n = len(idx)
        return {"count": n, "ok": int(ok.sum()), "errors": int(n - ok.sum()),
                "error_rate": float((~ok).mean()) if n else 0.0, "achieved_rate": n / 60.0,
                "accuracy": rows.accuracy_of(idx[ok]),
                "send_lag_p99_ms": float(np.percentile(rows.send_lag_ns[idx], 99) / 1e6) if n else None}

    rng = np.random.default_rng(5)
    for trial in range(24):
        n = int(rng.integers(1, 20_000))
        endpoints = rng.choice(["b", "a", "c"], n, p=[0.6, 0.399, 0.001])
        regions = rng.choice(["r2", "r1"], n).astype(object)
        if trial % 4 == 1:
            regions[rng.random(n) < 0.01] = None
        columns = {"endpoint": pd.Categorical(endpoints), "region": pd.Categorical(regions),
                   "status": pd.Categorical(rng.choice(["ok", "timeout"], n, p=[0.97, 0.03])),
                   "send_lag_ns": rng.integers(0, int(rng.choice([5, 10**7])), n),
                   "correct": rng.random(n) < 0.9}
        if trial % 3:
            columns |= {"correct_count": rng.integers(-1, 4, n).astype(np.int32),
                        "batch_size": rng.integers(1, 4, n).astype(np.int32)}
        df = frame_of(columns, pd.RangeIndex(n))
        among = None if trial % 2 else np.flatnonzero(rng.random(n) < 0.7).astype(np.int32)
        positions = endpoint_region_positions(df, among)
        want = [counted(_Rows(df), idx()) for _, idx in row_positions(df, positions, among)]
        assert request_count_table(df, 60.0, positions, among) == want, trial


def test_rows_with_no_region_count_in_their_endpoints_and_the_overall_percentiles():
    """A row with no region is in its endpoint's and the overall latency row but in no endpoint × region group:
    those rows' percentiles are of all their requests (they had been read from the groups' sorted latencies
    alone: p50 4.93 ms where numpy's is 6.69 ms)."""
    from types import SimpleNamespace

    import pandas as pd

    from tailrace.analysis.read.frames import frame_of
    from tailrace.analysis.stats.latency import latency_table

    rng = np.random.default_rng(2)
    n = 5000
    regions = rng.choice(["r1", "r2"], n).astype(object)
    regions[:1500] = None
    latency = rng.integers(1_000_000, 9_000_000, n)
    latency[:1500] += 50_000_000  # the rows with no region are the slow ones
    endpoints = rng.choice(["a", "b"], n)
    df = frame_of({"endpoint": pd.Categorical(endpoints), "region": pd.Categorical(regions),
                   "status": pd.Categorical(["ok"] * n), "latency_ns": latency,
                   "t_intended_ref": np.arange(n) * 1000, "send_lag_ns": np.zeros(n, dtype=np.int64),
                   "correct": np.ones(n, dtype=bool)}, pd.RangeIndex(n))
    rows, _ = latency_table(df, SimpleNamespace(load=SimpleNamespace(scenario="offline")), 10.0)
    for row in rows:
        if row["region"] == "*":
            mine = latency if row["endpoint"] == "*" else latency[endpoints == row["endpoint"]]
            for p in (50, 99):
                assert row["percentiles"][f"p{p}"]["value"] == float(np.percentile(mine / 1e6, p)), (row["endpoint"], p)


def test_clock_models_map_times_as_their_formula_in_place():
    """OffsetModel.to_reference (in place, one temporary) gives t + round(offset_at(t)) to the nanosecond, into a
    slice of a larger array as to a new one; to_reference fills each worker's run by its model."""
    import pandas as pd

    from tailrace.analysis.read.clock_correction import OffsetModel, to_reference, worker_runs

    rng = np.random.default_rng(5)
    t = 1_790_000_000_000_000_000 + np.sort(rng.integers(0, 3_600 * 10**9, 50_000))
    models = {"w1": OffsetModel("w1", int(t[0]), 12_345.678, 3.2e-6, 1.0, 5, 5),
              "w2": OffsetModel("w2", int(t[-1]), -40e6, -1e-5, 1.0, 5, 5)}
    for model in models.values():
        want = t + np.round(model.offset_at(t)).astype(np.int64)
        assert np.array_equal(model.to_reference(t), want)
        into = np.zeros(len(t) + 10, dtype=np.int64)
        model.to_reference(t, out=into[5:-5])
        assert np.array_equal(into[5:-5], want) and not into[:5].any() and not into[-5:].any()
    workers = pd.Categorical(np.repeat(["w1", "w2", "w3"], [20_000, 20_000, 10_000]))
    offsets = rng.integers(-1000, 1000, len(t))
    ref = to_reference(t, offsets, worker_runs(workers), models)
    assert np.array_equal(ref[:20_000], models["w1"].to_reference(t[:20_000]))
    assert np.array_equal(ref[20_000:40_000], models["w2"].to_reference(t[20_000:40_000]))
    assert np.array_equal(ref[40_000:], t[40_000:] + offsets[40_000:])  # w3 has no model: its stamped offsets


def test_chunks_older_than_a_column_are_read_with_its_default(tmp_path):
    """Chunks written before batch_size / correct_count existed (contract/records.py OPTIONAL_DEFAULTS), mixed
    with newer ones and read in parallel: every row gets batch 1 and its correct flag as its count."""
    import pyarrow.parquet as pq

    from tailrace.contract.layout import RunLayout

    write_run(tmp_path, profile=profile_dict(400, 5), chunk_rows=100, workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 200, "duration_s": 5, "errors": 0.2},
        "r2-w0": {"region": "r2", "latency_ms": 5, "rate": 200, "duration_s": 5, "errors": 0.2}})
    chunks = RunLayout(tmp_path).request_chunks()
    for path in chunks[::2]:
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["batch_size", "correct_count"]), path)
    df = load_run(tmp_path).requests
    assert len(df) == 2000 and len(chunks) == 20
    assert (df["batch_size"] == 1).all()
    assert (df["correct_count"] == df["correct"].astype(int)).all() and (~df["correct"]).sum() > 100


@pytest.mark.parametrize("error_fraction,verdict,code", [(0.05, "FAIL", 1), (0.0, "PASS", 0)])
def test_refused_requests_fail_a_run_that_declares_no_slo(tmp_path, error_fraction, verdict, code):
    """With no SLO in the profile, every endpoint × region is held to an implicit error rate of ≤ 1%: a run whose
    requests were refused ends in FAIL, never in PASS for want of a goal."""
    write_run(tmp_path, profile=profile_dict(100, 10), workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 50, "duration_s": 10, "errors": error_fraction},
        "r2-w0": {"region": "r2", "latency_ms": 5, "rate": 50, "duration_s": 10}})
    s = analyze_run(tmp_path).summary
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


@pytest.mark.parametrize("q", [0.5, 0.99])
def test_grouped_quantile_is_pandas_groupby_quantile(q):
    """Packed integers and the lexsort fallback (floats) both give numpy's linear quantile per group."""
    import pandas as pd

    from tailrace.analysis.stats.estimators import grouped_quantile

    rng = np.random.default_rng(3)
    keys = rng.integers(0, 50, 20_000)
    values = rng.lognormal(15, 1, 20_000).astype(np.int64)
    expected = pd.Series(values).groupby(keys).quantile(q)
    for v in (values, values.astype(float)):
        got_keys, got = grouped_quantile(keys, v, q)
        assert np.array_equal(got_keys, expected.index.to_numpy())
        np.testing.assert_allclose(got, expected.to_numpy(), rtol=1e-12)
    one_key, one = grouped_quantile(np.array([7]), np.array([42]), q)
    assert one_key.tolist() == [7] and one.tolist() == [42.0]


def test_an_analysing_process_keeps_freed_memory_and_small_pages():
    """reuse_freed_memory (process_memory.settle's, for tailrace analyze / compare before they analyse) takes
    effect in the process: transparent huge pages off (PR_GET_THP_DISABLE), a thread's memory from the one heap,
    and it reports the effective settings."""
    import json
    import subprocess
    import sys

    code = ("import ctypes, json, threading; from tailrace.analysis.read.process_memory import reuse_freed_memory\n"
            "s = reuse_freed_memory() if SETTLE else {}\n"
            "libc = ctypes.CDLL(None); libc.malloc.restype = libc.sbrk.restype = ctypes.c_void_p\n"
            "block = []; t = threading.Thread(target=lambda: block.append(libc.malloc(1 << 20))); t.start(); t.join()\n"
            "print(json.dumps([s, libc.prctl(42, 0, 0, 0, 0), block[0] < libc.sbrk(0)]))")

    def run(settle: bool):
        return json.loads(subprocess.run([sys.executable, "-c", f"SETTLE = {settle}\n" + code], capture_output=True,
                                         text=True, check=True, timeout=60).stdout)

    settings, thp_disabled, thread_block_in_main_heap = run(True)
    assert settings == {"malloc_mmap_max": 0, "malloc_trim_threshold": 2**31 - 1, "malloc_arena_max": 1,
                        "transparent_huge_pages": "off"}
    assert thp_disabled == 1
    assert thread_block_in_main_heap  # a thread's block comes from the one heap (below its break)
    assert run(False)[2] is False  # by default a thread's comes from an arena of its own


def _synthetic(tmp_path, rows: int = 30_000):
    from bench.synthetic_run import Shape, write_synthetic_run

    run_dir = tmp_path / "run"
    write_synthetic_run(run_dir, Shape(rows, chunks=12, seed=5))
    return run_dir


@pytest.mark.parametrize("keep_bytes", ["default", 0])
def test_reading_a_few_columns_at_a_time_gives_the_numbers_of_reading_them_all(tmp_path, monkeypatch, keep_bytes):
    """`tailrace analyze` reads the log a few columns at a time and frees each after its last reader; the
    Python API reads it whole. Same summary, same tables, and only the report's columns are left loaded —
    also when every spared column is freed and read again (keep_bytes 0: a day's log, above KEEP_BYTES)."""
    import json

    import tailrace.analysis.read.chunks as chunks
    from tailrace.analysis.analyze import REPORT_COLUMNS
    from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS
    from tailrace.analysis.report.figures import Figures
    from tailrace.analysis.stats.timeline import timeline

    class Submitted(Figures):  # what tailrace analyze's figure process would be handed
        ahead = True

        def __init__(self) -> None:
            self.args: dict[str, tuple] = {}

        def submit(self, name: str, *args) -> None:
            self.args[name] = args

    if keep_bytes != "default":
        monkeypatch.setattr(chunks, "KEEP_BYTES", keep_bytes)
    run_dir = _synthetic(tmp_path)
    figures = Submitted()
    whole, lazy = analyze_run(run_dir), analyze_run(run_dir, ANALYSIS_COLUMNS, figures=figures)
    # the figures' numbers, whether the statistics computed beside each other (default) or in order (0)
    assert sorted(figures.args) == ["clock_offsets", "decomposition_bars", "heatmap_p99", "latency_cdfs",
                                    "over_time_of", "queue_vs_utilization"]
    line, _, outages = figures.args["over_time_of"]
    expected = timeline(lazy.requests)
    assert line.whole_s == expected.whole_s and line.p99_ms.keys() == expected.p99_ms.keys()
    for region, p99 in expected.p99_ms.items():
        np.testing.assert_array_equal(line.p99_ms[region], p99)
        np.testing.assert_array_equal(line.requests[region], expected.requests[region])
    assert outages == lazy.summary["outages"] and figures.args["latency_cdfs"] == (lazy.cdfs,)
    assert json.dumps(lazy.summary, default=str) == json.dumps(whole.summary, default=str)
    assert lazy.tables.keys() == whole.tables.keys()
    for name, table in whole.tables.items():
        assert lazy.tables[name].equals(table), name
    assert sorted(lazy.data.log._values) == sorted(REPORT_COLUMNS)
    assert list(lazy.requests.columns) == list(REPORT_COLUMNS)
    assert lazy.summary["input"]["rows_read"] == 30_000 and lazy.summary["latency"][-1]["count"] > 0


def _corrupt_latency_pages(chunk) -> None:
    """Overwrite a chunk's first latency_ns page past its header: its footer and other columns still read."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(chunk).row_group(0)
    column = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == "latency_ns")
    data = bytearray(chunk.read_bytes())
    start = column.data_page_offset + 24  # past the page header: into the compressed values
    data[start:start + 64] = bytes(range(64))
    chunk.write_bytes(bytes(data))


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


def test_a_chunk_unreadable_in_a_later_column_is_skipped_and_the_analysis_run_again(tmp_path):
    """A chunk whose footer and first columns read but whose latency pages are corrupt: found only when the
    latency column is read, after statistics used its other columns. It is reported as skipped and every
    statistic is computed without it (the run analysed again), never half with it."""
    import pyarrow.parquet as pq

    from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS

    run_dir = _synthetic(tmp_path)
    chunk = sorted(run_dir.glob("regions/*/*/requests-*.parquet"))[0]
    rows = pq.read_metadata(chunk).num_rows
    _corrupt_latency_pages(chunk)
    with pytest.raises(Exception):
        pq.read_table(chunk, columns=["latency_ns"])
    pq.read_table(chunk, columns=["worker", "phase", "status", "endpoint", "region"])  # these still read

    summary = analyze_run(run_dir, ANALYSIS_COLUMNS).summary
    (skipped,) = summary["input"]["chunks_skipped"]
    assert skipped["path"] == str(chunk) and "latency_ns" in skipped["reason"], skipped
    assert summary["input"]["rows_read"] == 30_000 - rows
    assert sum(r["count"] for r in summary["phases"]) == 30_000 - rows


def _flip_one_bit(chunk, column_name: str) -> None:
    """Flip one bit in the middle of a chunk's `column_name` pages: a damage no decoder notices by itself."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(chunk).row_group(0)
    column = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column_name)
    data = bytearray(chunk.read_bytes())
    data[column.data_page_offset + column.total_compressed_size // 2] ^= 0x04
    chunk.write_bytes(bytes(data))


@pytest.mark.parametrize("column_name", ["latency_ns", "trace_id"])
def test_one_flipped_bit_in_a_chunk_is_found_by_its_page_checksum_and_the_chunk_skipped(tmp_path, column_name):
    """Delta-packed pages decode a flipped bit to other numbers without complaint: the chunk writer's page CRCs
    make it an error naming the chunk, and the analysis runs again without it — also when the damage is in
    the trace ids, read last and only for the rows the report names."""
    import pyarrow.parquet as pq

    from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS

    run_dir = _synthetic(tmp_path)
    clean = analyze_run(run_dir, ANALYSIS_COLUMNS).summary
    named = {r["trace_id"] for r in clean["slowest"]}
    chunks = sorted(run_dir.glob("regions/*/*/requests-*.parquet"))
    chunk = next(c for c in chunks if named & set(pq.read_table(c, columns=["trace_id"]).column(0).to_pylist()))
    rows = pq.read_metadata(chunk).num_rows
    _flip_one_bit(chunk, column_name)
    with pytest.raises(OSError, match="CRC"):
        pq.read_table(chunk, columns=[column_name], page_checksum_verification=True)
    summary = analyze_run(run_dir, ANALYSIS_COLUMNS).summary
    (skipped,) = summary["input"]["chunks_skipped"]
    assert skipped["path"] == str(chunk) and "CRC" in skipped["reason"] and column_name in skipped["reason"]
    assert summary["input"]["rows_read"] == 30_000 - rows
    assert clean["valid"] and not summary["valid"] and summary["verdict"] == "INVALID" and summary["exit_code"] == 4
    assert summary["invalid_reasons"][-1].startswith(f"1 request chunk(s) could not be read ({chunk};")


def test_only_unreadable_request_chunks_make_a_run_invalid():
    """The requests are the measurement: a request chunk that cannot be read is missing from every number. A torn
    last line of a server-statistics log or a damaged clock chunk is reported as skipped, and the run stands."""
    from tailrace.analysis.read.chunks import SkippedChunk, unread_request_chunks

    others = [SkippedChunk("/r/endpoints/a/stats-timeline.jsonl:7", "not valid JSON"),
              SkippedChunk("/r/regions/eu/eu-w0/clock-00002.parquet", "CRC mismatch")]
    assert unread_request_chunks(others) == []
    lost = [SkippedChunk("/r/regions/eu/eu-w0/requests-00007.parquet", "CRC mismatch"),
            SkippedChunk("/r/regions/us/us-w1/requests-00003.parquet", "truncated")]
    (reason,) = unread_request_chunks(others + lost)
    assert reason.startswith("2 request chunk(s) could not be read (/r/regions/eu/eu-w0/requests-00007.parquet and 1 "
                             "more;")


def test_a_run_directory_missing_chunks_a_worker_wrote_is_invalid_and_names_the_worker(tmp_path):
    """A request chunk deleted, or never delivered to the master, leaves nothing to skip: the analysis counts each
    worker's rows against what its summary says it wrote, so the rest can never PASS as if it were the run."""
    import json

    import pyarrow.parquet as pq

    from tailrace.analysis.read.chunks import SkippedChunk, missing_requests
    from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS

    run_dir = _synthetic(tmp_path)
    assert analyze_run(run_dir, ANALYSIS_COLUMNS).summary["valid"]
    chunk = sorted(run_dir.glob("regions/*/*/requests-*.parquet"))[0]
    rows, worker = pq.read_metadata(chunk).num_rows, chunk.parent.name
    written = json.loads((run_dir / "manifest.json").read_text())["workers"][worker]["summary"]["rows_written"]
    chunk.unlink()
    summary = analyze_run(run_dir, ANALYSIS_COLUMNS).summary
    assert not summary["valid"] and summary["verdict"] == "INVALID" and summary["exit_code"] == 4
    assert summary["invalid_reasons"] == [f"{worker}: {rows:,} of the {written:,} requests it recorded are not in the "
                                          "run directory (chunks missing; `tailrace collect SPOOL RUN_DIR` copies "
                                          "those a worker kept)"]
    # a worker with a damaged chunk is named once, by the damaged chunk
    assert missing_requests({worker: written}, {worker: written - rows},
                            [SkippedChunk(str(chunk), "CRC mismatch")]) == []


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
