"""The analysis' frames and groups give pandas' numbers without its copies; latency rows and counts add up."""


from __future__ import annotations

import numpy as np
import pytest


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


@pytest.mark.parametrize("block", [1 << 20, 16, 1])
def test_the_slowest_rows_are_pandas_nlargest_with_its_ties_and_nans(block, monkeypatch):
    """largest_positions picks the rows pandas' Series.nlargest (keep="first") picks, in its order: largest first,
    equal values in row order, NaN last — for integer and float values, k above and below the rows' count, the rows
    in one block or in many (ties and NaN across blocks)."""
    import pandas as pd

    from tailrace.analysis.read import frames
    from tailrace.analysis.read.frames import largest_positions

    monkeypatch.setattr(frames, "LARGEST_BLOCK", block)
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


@pytest.mark.parametrize("block", [7, 1 << 20])
def test_latencies_in_ms_gathered_a_block_at_a_time_are_the_whole_columns(monkeypatch, block):
    """ms_at gives values[rows].astype(float) / 1e6 to the bit, in one block and in many (positions out of order,
    repeated, of either width, none), and so does the latency rows' mean summed a block at a time: numpy's mean of
    those values, whether the whole column is converted first or each block is gathered."""
    import pandas as pd

    from tailrace.analysis.read import frames
    from tailrace.analysis.read.frames import ms_at
    from tailrace.analysis.stats import latency
    from tailrace.analysis.stats.latency import _Rows

    monkeypatch.setattr(frames, "GATHER_BLOCK", block)
    rng = np.random.default_rng(5)
    values = rng.integers(1, 10**12, 5_000)
    for rows in (rng.integers(0, len(values), 3_001), np.flatnonzero(rng.random(len(values)) < 0.6).astype(np.int32),
                 np.arange(0)):
        assert np.array_equal(ms_at(values, rows), values[rows].astype(float) / 1e6)
    values = rng.lognormal(20, 3, 200_000).astype(np.int64) + 1  # past a few of the sum's blocks
    df = pd.DataFrame({"status": np.where(rng.random(len(values)) < 0.9, "ok", "error"), "latency_ns": values})
    rows = np.flatnonzero(rng.random(len(values)) < 0.8)
    for whole in (10**9, 0):  # the whole column in ms, or each block gathered
        monkeypatch.setattr(latency, "WHOLE_COLUMN_MS_ROWS", whole)
        assert _Rows(df).mean_ms(rows) == float((values[rows].astype(float) / 1e6).mean()), whole
    assert _Rows(df).mean_ms(rows[:0]) is None


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
        gone = rows.cancelled[idx] if rows.cancelled is not None else np.zeros(n, dtype=bool)
        failed = ~ok & ~gone  # a cancelled request is neither ok nor an error, and outside the error rate
        return {"count": n, "ok": int(ok.sum()), "errors": int(failed.sum()), "cancelled": int(gone.sum()),
                "error_rate": float(failed.sum() / (~gone).sum()) if (~gone).any() else 0.0, "achieved_rate": n / 60.0,
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
                   "status": pd.Categorical(rng.choice(["ok", "timeout", "cancelled"], n,
                                                       p=[0.95, 0.03, 0.02] if trial % 2 else [0.97, 0.03, 0])),
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
        if row.region == "*":
            mine = latency if row.endpoint == "*" else latency[endpoints == row.endpoint]
            for p in (50, 99):
                assert row.percentiles[f"p{p}"].value == float(np.percentile(mine / 1e6, p)), (row.endpoint, p)


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


@pytest.mark.parametrize("q", [0.0, 0.5, 0.99, 1.0])
def test_grouped_quantile_by_partition_is_the_sorts_to_the_bit(q, monkeypatch):
    """Few small keys (per-second lines) take each group's order statistics by a partition: the same bits as the
    sort of every value, for groups of one, two and thousands of rows, keys with gaps, ties and negative values;
    many keys or small groups keep the sort."""
    from tailrace.analysis.stats import estimators

    rng = np.random.default_rng(8)
    keys = np.concatenate([rng.integers(0, 40, 50_000) * 3, [200, 201, 201, 65_535]])  # gaps, a group of 1 and 2
    values = np.concatenate([rng.integers(-10**6, 10**9, 50_000) // 1000 * 1000, [5, 9, 7, 11]])  # ties
    shuffle = rng.permutation(len(keys))
    keys, values = keys[shuffle], values[shuffle]
    assert estimators._grouped_by_radix(keys, values, q) is not None
    got_keys, got = estimators.grouped_quantile(keys, values, q)
    monkeypatch.setattr(estimators, "MIN_GROUP_ROWS", 10**9)  # the sort's answer
    assert estimators._grouped_by_radix(keys, values, q) is None
    want_keys, want = estimators.grouped_quantile(keys, values, q)
    assert np.array_equal(got_keys, want_keys) and got.tobytes() == want.tobytes()
    for key in (0, 3, 201, 65_535):
        assert got[got_keys == key][0] == np.quantile(values[keys == key], q)
    assert estimators._grouped_by_radix(np.array([70_000] * 100), np.arange(100), q) is None  # keys past 16 bits


@pytest.mark.parametrize("values", [
    ["ok", "timeout", None, "ok", "http_error"],  # a categorical of strings, one missing: its categories' names
    [1, 2, None, 1],  # numbers: pandas' own text ("1.0" beside a missing one)
    [],
])
def test_a_columns_strings_are_pandas_astype_str(values):
    import pandas as pd

    from tailrace.analysis.read.frames import strings

    for column in (pd.Series(pd.Categorical(values)), pd.Series(values, dtype=object)):
        expected, got = column.astype(str).to_numpy(), strings(column)
        assert got.dtype == object and len(got) == len(expected)
        assert [x if isinstance(x, str) else "missing" for x in got] == \
            [x if isinstance(x, str) else "missing" for x in expected]
        assert all(isinstance(x, str) or np.isnan(x) for x in got)


@pytest.mark.parametrize("values", [
    ["synthetic_a", None, "tiny_lm", "synthetic_a"],  # one missing: left out
    ["b", "a"],
    [],
])
def test_a_columns_present_values_are_its_unique_ones_less_the_missing(values):
    import pandas as pd

    from tailrace.analysis.read.frames import present

    unused = pd.Categorical(values, categories=sorted({v for v in values if v is not None} | {"never_sent"}))
    for column in (unused, pd.Series(unused), pd.Series(values, dtype=object), np.array(values, dtype=object)):
        expected = {v for v in pd.Series(values, dtype=object).unique() if isinstance(v, str)}
        assert set(present(column)) == expected  # never a category no row uses ("never_sent")
        assert len(present(column)) == len(expected)


def test_latencies_sorted_as_integers_are_the_sorted_milliseconds(monkeypatch):
    """sorted_ms_at gives np.sort of the latencies in ms, to the bit: as 32-bit offsets where the rows span under
    NARROW_SPAN (over several gather blocks), as before where they span more, and for no rows."""
    import tailrace.analysis.read.frames as frames
    from tailrace.analysis.read.frames import sorted_ms_at

    monkeypatch.setattr(frames, "GATHER_BLOCK", 1_000)
    rng = np.random.default_rng(8)
    values = rng.lognormal(17, 1.5, 20_000).astype(np.int64)  # ~24 ms, some past a second
    for rows, span in ((np.sort(rng.choice(len(values), 7_777, replace=False)), "narrow"), (np.arange(0), "none")):
        assert np.array_equal(sorted_ms_at(values, rows), np.sort(values[rows].astype(float) / 1e6)), span
    wide = values.copy()
    wide[::3] += 5 * 10**9  # a span of over 4.3 s: sorted as floats
    rows = np.arange(len(wide))
    assert np.ptp(wide) >= frames.NARROW_SPAN
    assert np.array_equal(sorted_ms_at(wide, rows), np.sort(wide.astype(float) / 1e6))
