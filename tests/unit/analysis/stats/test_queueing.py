"""Queueing and utilization from the server's columns, outage windows, and the queueing formulas."""


from __future__ import annotations

import numpy as np
import pytest


def _requests(statuses: list[str], endpoint: str = "a", gap_ns: int = 100_000_000):
    import pandas as pd

    n = len(statuses)
    return pd.DataFrame({"endpoint": endpoint, "t_intended_ref": np.arange(n, dtype=np.int64) * gap_ns,
                         "status": statuses, "code": ["c"] * n, "region": ["r"] * n,
                         "trace_id": [f"{i:032x}" for i in range(n)]})


def test_outage_windows_runs_of_failures_merged_across_a_stray_success():
    from tailrace.analysis.stats.timeline import outage_windows

    # 0.1 s apart: 7 failures, 1 stray success, 6 failures (one outage), 20 ok, 3 failures (too few), 6 failures
    statuses = ["ok"] * 10 + ["connection"] * 7 + ["ok"] + ["http_error"] * 6 + ["ok"] * 20 + ["timeout"] * 3 + \
        ["ok"] * 20 + ["connection"] * 6
    windows = outage_windows(_requests(statuses))
    assert len(windows) == 2
    first, last = windows
    assert (first.failed, first.succeeded, first.start_s, first.end_s) == (13, 1, 1.0, 2.4)
    assert first.errors == {"connection/c": 7, "http_error/c": 6} and first.recovered
    assert last.end_s is None and not last.recovered and last.failed == 6
    assert outage_windows(_requests(["ok"] * 50)) == []


def test_outage_windows_read_off_the_logs_time_order_are_those_sorted_per_endpoint():
    """Given the log's time order (TimeOrder, found once for the latency table), the outages are the ones found by
    sorting each endpoint's rows: two endpoints interleaved, rows out of time order, ties in intended time."""
    import pandas as pd

    from tailrace.analysis.stats.correlation import TimeOrder
    from tailrace.analysis.stats.timeline import outage_windows

    rng = np.random.default_rng(5)
    n = 6_000
    failing = (np.arange(n) // 300) % 4 == 1  # stretches of failures in intended time, with strays
    failing ^= rng.random(n) < 0.02
    times = np.arange(n, dtype=np.int64) * 10_000_000 // 3  # three requests to a 10 ms tick: ties
    shuffle = np.argsort(times + rng.integers(-30_000_000, 30_000_000, n), kind="stable")  # completion order
    df = pd.DataFrame({"endpoint": pd.Categorical(rng.choice(["a", "b"], n)), "t_intended_ref": times[shuffle],
                       "status": np.where(failing, "timeout", "ok")[shuffle], "code": "c", "region": "r",
                       "trace_id": [f"{i:032x}" for i in range(n)]})
    plain = outage_windows(df)
    assert len(plain) >= 4
    assert outage_windows(df, time_order=TimeOrder(df["t_intended_ref"].to_numpy())) == plain


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
    assert streamed == queueing_table(df, {}, {"synthetic_mm1"}) and streamed[0].mm1 is not None
    assert most == 2 and not loaded and [c for c in calls if not c.startswith("done")] == list(SERVER_COLUMNS)


def test_a_models_arrivals_are_every_endpoints_that_shares_it_and_an_endpoints_own_where_it_is_alone():
    """The M/M/1 check reads the model's arrivals: a model behind two endpoints counts both endpoints' requests
    (its rate their sum, its c_a² of the merged instants); a model behind one endpoint alone — or one whose other rows
    carry no endpoint — counts exactly its own."""
    import pandas as pd

    from tailrace.analysis.stats.queueing import interarrival_cv2, queueing_table

    a, b, c = _server_side(300, 20, 1.0, seed=1), _server_side(200, 20, 1.0, seed=2), _server_side(100, 20, 1.0, seed=3)
    a["endpoint"], a["model"] = "a", "synthetic_shared"
    b["endpoint"], b["model"] = "b", "synthetic_shared"
    c["endpoint"], c["model"] = "c", "synthetic_alone"
    stray = c.iloc[::10].copy()
    stray["endpoint"] = None  # the alone model's rows with no endpoint: its own arrivals, in no endpoint's group
    df = pd.concat([a, b, c, stray], ignore_index=True)
    df["endpoint"], df["model"] = pd.Categorical(df["endpoint"]), pd.Categorical(df["model"])  # as the log reads them
    rows = {r.endpoint: r for r in queueing_table(df, {}, {"synthetic_shared", "synthetic_alone"})}

    def window_cv2(receive_of_endpoint, receive_of_model):
        t0 = int(receive_of_endpoint.min())
        t1 = int((receive_of_endpoint + 1_050_000).max())
        w0, w1 = t0 + (t1 - t0) // 10, t1 - (t1 - t0) // 10
        inside = receive_of_model[(receive_of_model >= w0) & (receive_of_model < w1)]
        return interarrival_cv2(inside), len(inside) / ((w1 - w0) / 1e9)

    shared = np.concatenate([a["server_receive_ns"], b["server_receive_ns"]])
    cv2, rate = window_cv2(a["server_receive_ns"].to_numpy(), shared)
    assert rows["a"].mm1.arrival_cv2 == cv2 and rows["a"].mm1.rho == rate * rows["a"].mean_service_ms / 1e3
    alone = np.concatenate([c["server_receive_ns"], stray["server_receive_ns"]])
    cv2, rate = window_cv2(c["server_receive_ns"].to_numpy(), alone)
    assert rows["c"].mm1.arrival_cv2 == cv2 and rows["c"].mm1.rho == rate * rows["c"].mean_service_ms / 1e3
    by_itself = queueing_table(c, {}, {"synthetic_alone"})[0]
    assert by_itself.mm1.arrival_cv2 == by_itself.arrival_cv2 and by_itself.mm1.rho == by_itself.utilization


def test_utilization_counts_a_batch_execution_once():
    """With dynamic batching each request reports its batch's compute: 400/s × 2 ms is ρ = 0.8 unbatched, but
    at 4 requests per execution the slot is busy only a fifth of the time."""
    from tailrace.analysis.read.triton_stats import requests_per_execution
    from tailrace.analysis.stats.queueing import queueing_table

    df = _server_side(400, 20, 2.0)
    unbatched = queueing_table(df, {}, set())[0]
    assert unbatched.utilization == pytest.approx(0.8, rel=0.05) and unbatched.requests_per_execution == 1
    per_exec = requests_per_execution([stats_row(success=8000, execution_count=2000)])
    batched = queueing_table(df, {}, set(), per_exec)[0]
    assert per_exec == {"e": 4.0}
    assert batched.utilization == pytest.approx(unbatched.utilization / 4)
    # requests of 128 samples each, one execution per request: no correction
    assert requests_per_execution([stats_row(success=50, execution_count=50, inference_count=6400)]) == {"e": 1.0}


def stats_row(**counts: int):
    """A server-side statistics row of endpoint "e"'s model."""
    from tailrace.contract.summary.tables import EndpointStatistics

    return EndpointStatistics(endpoints=["e"], endpoint="e", server="s", kind="embedded", model="m", **counts)


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


def test_time_in_system_summed_a_block_at_a_time_is_the_whole_arrays(monkeypatch):
    """time_average_in_system sums the clipped lengths a block at a time: the same number as clipping and summing
    the whole arrays at once, for intervals before, across, inside and after the window, in one block and many."""
    from tailrace.analysis.stats import queueing
    from tailrace.analysis.stats.queueing import time_average_in_system

    rng = np.random.default_rng(8)
    starts = rng.integers(0, 10**9, 5_000)
    ends = starts + rng.integers(0, 10**8, 5_000)
    t0, t1 = 2 * 10**8, 8 * 10**8
    whole = float(np.sum(np.maximum(np.clip(ends, t0, t1) - np.clip(starts, t0, t1), 0)) / (t1 - t0))
    for block in (7, 1000, 1 << 20):
        monkeypatch.setattr(queueing, "WINDOW_BLOCK", block)
        assert time_average_in_system(starts, ends, t0, t1) == whole
    assert time_average_in_system(starts / 1e9, ends / 1e9, 0.2, 0.8) == pytest.approx(whole)


def test_interarrival_cv2_a_block_of_gaps_at_a_time_is_numpys_var_over_mean_squared():
    """interarrival_cv2 sums the gaps a block at a time in numpy's pairwise order: to the bit what np.diff of the
    sorted instants, as floats, gives by var() / mean()² — arrivals out of order, tied, around the block's length
    and far beyond it; and None where fewer than two gaps, or only zero ones, exist."""
    from tailrace.analysis.stats.estimators import SUM_BLOCK
    from tailrace.analysis.stats.queueing import interarrival_cv2

    def whole(arrivals: np.ndarray) -> float | None:
        gaps = np.diff(np.sort(arrivals)).astype(float)
        return None if len(gaps) < 2 or gaps.mean() == 0 else float(gaps.var() / gaps.mean() ** 2)

    rng = np.random.default_rng(11)
    for n in (3, 129, SUM_BLOCK - 1, SUM_BLOCK + 2, 3 * SUM_BLOCK + 5, 1_000_003):
        arrivals = 1_700_000_000 * 10**9 + np.cumsum(rng.exponential(4e5, n)).astype(np.int64)
        arrivals[: n // 3] = rng.permutation(arrivals[: n // 3])  # a worker's rows interleaved with another's
        arrivals[n // 2: n // 2 + 50] = arrivals[n // 2]  # ties: zero gaps
        assert interarrival_cv2(arrivals) == whole(arrivals)
    assert interarrival_cv2(np.array([5, 9])) is None
    assert interarrival_cv2(np.full(10, 5)) is None


def test_a_float_stamp_column_beside_an_integer_one_gives_the_same_row():
    """A stamp column with a missing value somewhere is read as floats (NaN): beside an integer one its residence is
    the float difference, as where both are integers — the row is the one the integers give (stamps of a few
    seconds' span, exact as floats up to the nanosecond's fraction the 1e18 epoch rounds away)."""
    from tailrace.analysis.stats.queueing import queueing_table

    df = _server_side(400, 20, 2.0)
    df["server_receive_ns"] -= 10**18  # times whose floats are exact
    df["server_send_ns"] -= 10**18
    ints = queueing_table(df, {}, set())[0]
    for column in ("server_send_ns", "server_receive_ns"):
        mixed = df.copy()
        mixed[column] = mixed[column].astype(np.float64)
        assert queueing_table(mixed, {}, set())[0] == ints, column
