"""DataFrames of many rows without the copies pandas makes by default (pure helpers).

`pd.DataFrame(dict_of_arrays)` stacks same-typed columns into one block (a copy of them all) and a boolean
`df.loc[mask, columns]` goes through pandas' generic take; at ten million rows each costs seconds and a copy of
the table. These keep one array per column and take rows with numpy.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def frame_of(columns: dict[str, object], index: pd.Index | None = None) -> pd.DataFrame:
    """A DataFrame holding `columns` (arrays, Categoricals or Series) as they are: no block stacking, no copy."""
    series = [value.rename(name) if isinstance(value, pd.Series) else pd.Series(value, name=name, copy=False)
              for name, value in columns.items()]
    if not series:
        return pd.DataFrame(index=index)
    out = pd.concat(series, axis=1) if len(series) > 1 else series[0].to_frame()  # lazy copies: none made
    if index is not None:
        out.index = index
    return out


def strings(column: pd.Series) -> np.ndarray:
    """`column.astype(str).to_numpy()`: its values as Python strings, a missing one NaN. A categorical's are its
    categories' names picked by its codes — no string made per row: 0.01 s against 0.42 s for a million rows."""
    if isinstance(column.dtype, pd.CategoricalDtype) and all(isinstance(c, str) for c in column.cat.categories):
        names = np.array([*column.cat.categories, np.nan], dtype=object)  # a missing value's code, -1: the last
        return names[column.cat.codes.to_numpy()]
    return column.astype(str).to_numpy()  # (a number's text depends on the others: 1 is "1.0" beside a missing one)


def present(values) -> list:
    """The distinct values of a column (a Categorical, a categorical Series, or an array): a categorical's are the
    categories its codes use, counted in one pass over the codes (0.01 s against pandas' hashing of every row,
    0.38 s for 10 M rows); a missing value is left out, as `.unique()` of a categorical keeps it as NaN."""
    cat = values.array if isinstance(values, pd.Series) else values
    if isinstance(cat, pd.Categorical):
        codes = np.asarray(cat.codes)
        counts = np.bincount(codes[codes >= 0], minlength=len(cat.categories))
        return [c for c, k in zip(cat.categories, counts.tolist()) if k]
    return [v for v in pd.unique(np.asarray(values)) if not pd.isna(v)]


def row_runs(rows: np.ndarray) -> list[tuple[int, int]] | None:
    """Ascending positions as [start, stop) runs, when there are few of them (then copying slices beats
    gathering row by row); None otherwise. Found once for positions that several columns are taken at
    (take's `runs`)."""
    if len(rows) == 0:
        return []
    breaks = np.flatnonzero(np.diff(rows) != 1)
    if len(breaks) > max(64, len(rows) // 256):
        return None
    starts = np.concatenate([[rows[0]], rows[breaks + 1]])
    stops = np.concatenate([rows[breaks], [rows[-1]]]) + 1
    return list(zip(starts.tolist(), stops.tolist()))


def as_slice(rows: np.ndarray) -> slice | np.ndarray:
    """Ascending positions as a slice when they are contiguous (a worker's rows: indexing is then a view, not a
    gather), else as they are."""
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def _take(values: np.ndarray, rows: np.ndarray | None, runs: list[tuple[int, int]] | None) -> np.ndarray:
    if runs is None:
        return values if rows is None else values[rows]
    return np.concatenate([values[a:b] for a, b in runs]) if runs else values[:0].copy()


LARGEST_BLOCK = 1 << 20  # rows largest_positions gathers at a time (8 MB of values): no temporary the size of the log


def _top_in_row_order(picked: np.ndarray, k: int) -> np.ndarray:
    """The indices of `picked`'s (no NaN) k largest values, equal values the first ones, in ascending order."""
    if len(picked) <= k:
        return np.arange(len(picked))
    kth = np.partition(picked, len(picked) - k)[len(picked) - k]
    above = np.flatnonzero(picked > kth)
    tied = np.flatnonzero(picked == kth)[:k - len(above)]
    return np.sort(np.concatenate([above, tied]))


def largest_positions(values: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """The positions of the `k` largest of `values` at ascending `rows`, largest first, equal values in row order
    and NaN last: pandas' `Series.nlargest(k)` (keep="first") of values[rows], without a 10-million-row Series
    and its index. The rows are read a block at a time (LARGEST_BLOCK): each block's k largest (equal values the
    first ones) hold the whole's, and only those are sorted — no copy of a day's column, nor of its positions. Once k
    are held, a block keeps only its values above the k-th largest so far before its own are picked (a comparison
    where a partition was: a day's 100 blocks, 0.66 s of partitions)."""
    if k <= 0 or len(rows) == 0:
        return np.empty(0, dtype=np.int64)
    top_rows: list[np.ndarray] = []
    top_values: list[np.ndarray] = []
    nan_rows: list[np.ndarray] = []
    nans = 0
    for start in range(0, len(rows), LARGEST_BLOCK):
        block = rows[start:start + LARGEST_BLOCK]
        picked = values[block]
        if picked.dtype.kind == "f" and (nan := np.isnan(picked)).any():
            if nans < k:  # the first k NaN rows: the last of the largest, where fewer than k values are numbers
                nan_rows.append(block[nan][:k - nans])
                nans += len(nan_rows[-1])
            picked, block = picked[~nan], block[~nan]
        if sum(len(v) for v in top_values) >= k:  # only a value above the k-th largest so far can enter
            kth = np.partition(np.concatenate(top_values), -k)[-k]  # (a tie with it comes later: the earlier stays)
            above = np.flatnonzero(picked > kth)
            picked, block = picked[above], block[above]
        top = _top_in_row_order(picked, k)
        top_rows.append(block[top].astype(np.int64))
        top_values.append(picked[top])
    candidates, top_value = np.concatenate(top_rows), np.concatenate(top_values)  # rows ascending
    descending = -top_value if top_value.dtype.kind == "f" else ~top_value  # ~x = −x − 1: order-reversing, no overflow
    largest = candidates[np.argsort(descending, kind="stable")[:k]]  # stable: equal values in row order
    nan_at = np.concatenate(nan_rows).astype(np.int64) if nan_rows else largest[:0]
    return np.concatenate([largest, nan_at[:k - len(largest)]])


GATHER_BLOCK = 1 << 20  # rows ms_at gathers at a time: 8 MB of integers, no temporary the size of the rows


def ms_at(values_ns: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """values_ns[rows].astype(float) / 1e6 — the same values — with one array the size of `rows`, not three: the
    integers gathered a block at a time into the floats, divided in place."""
    out = np.empty(len(rows), dtype=np.float64)
    for start in range(0, len(rows), GATHER_BLOCK):
        out[start:start + GATHER_BLOCK] = values_ns[rows[start:start + GATHER_BLOCK]]
    out /= 1e6
    return out


NARROW_SPAN = 1 << 32  # integers spanning less than this sort as 32-bit offsets from their least


def sorted_ms_at(values_ns: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """np.sort(ms_at(values_ns, rows)) — the same values — sorted as integers before they are converted (the
    conversion keeps their order): where they span under NARROW_SPAN ns (4.3 s), as 32-bit offsets from their least,
    which numpy's vectorised sort takes twice as many of a step as 64-bit values (11 M latencies, gathered and
    converted: 0.58 against 1.12 s). Gathered a block at a time: no int64 copy of the rows."""
    blocks = range(0, len(rows), GATHER_BLOCK)
    narrow = len(rows) > 0 and values_ns.dtype.kind in "iu"
    if narrow:
        low = min(int(values_ns[rows[a:a + GATHER_BLOCK]].min()) for a in blocks)
        high = max(int(values_ns[rows[a:a + GATHER_BLOCK]].max()) for a in blocks)
        narrow = high - low < NARROW_SPAN and max(high, -low) < 2**53  # (floats hold integers exactly below 2^53)
    if not narrow:
        out = ms_at(values_ns, rows)
        out.sort()
        return out
    offsets = np.empty(len(rows), dtype=np.uint32)
    for a in blocks:
        np.subtract(values_ns[rows[a:a + GATHER_BLOCK]], low, out=offsets[a:a + GATHER_BLOCK], casting="unsafe")
    offsets.sort()
    out = np.empty(len(rows), dtype=np.float64)
    for a in blocks:  # offset + least, exact in floats (under 2^53): the integer's own float
        np.add(offsets[a:a + GATHER_BLOCK], float(low), out=out[a:a + GATHER_BLOCK])
    out /= 1e6
    return out


def key_runs(df: pd.DataFrame, keys: list[str]) -> dict | None:
    """group_positions(df, keys) as [start, stop) runs of rows — for a log whose groups come in long stretches
    (a worker's phases, each worker's chunks one after another): no array of positions. None when the rows
    change key too often for runs to pay."""
    if len(df) == 0:
        return {}
    change = np.zeros(len(df) - 1, dtype=bool)
    for key in keys:
        column = df[key]
        codes = column.cat.codes.to_numpy() if isinstance(column.dtype, pd.CategoricalDtype) else column.to_numpy()
        change |= codes[1:] != codes[:-1]
    bounds = np.flatnonzero(change) + 1
    if len(bounds) > max(64, len(df) // 256):
        return None
    starts = np.concatenate([[0], bounds]).tolist()
    stops = np.concatenate([bounds, [len(df)]]).tolist()
    firsts = zip(*(df[key].iloc[starts].tolist() for key in keys))  # Python values, as group_positions keys them
    out: dict = {}
    for values, start, stop in zip(firsts, starts, stops):
        if any(pd.isna(v) for v in values):
            continue  # a missing value: no group, as pandas' dropna
        out.setdefault(values[0] if len(keys) == 1 else values, []).append((start, stop))
    return out


def take_runs(values: np.ndarray, runs: list[tuple[int, int]]) -> np.ndarray:
    """values at the rows of `runs` ([start, stop) in ascending order), as one array."""
    return _take(values, None, runs)


_UNKNOWN: list = []  # take's default: find the runs


def take(values: np.ndarray, rows: np.ndarray, runs: list[tuple[int, int]] | None = _UNKNOWN) -> np.ndarray:
    """values[rows] for ascending `rows`, copied as slices when they run contiguously. `runs`: row_runs(rows),
    when the caller has it."""
    return _take(values, rows, row_runs(rows) if runs is _UNKNOWN else runs)


def take_column(column: pd.Series, rows: np.ndarray, runs: list[tuple[int, int]] | None = None) -> object:
    """The values of `column` at ascending positions `rows` (a Categorical stays categorical, by its codes);
    `runs`: the same positions as runs (row_runs), when known."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return pd.Categorical.from_codes(_take(column.cat.codes.to_numpy(), rows, runs), dtype=column.dtype)
    if isinstance(column.dtype, np.dtype):
        return _take(column.to_numpy(), rows, runs)
    return column.array.take(rows)


def take_rows(df: pd.DataFrame, rows: np.ndarray, columns=None) -> pd.DataFrame:
    """`columns` (default all) of `df` at positions `rows` (ascending int array or boolean mask), keeping
    their row labels. Rows in long runs (a phase of each worker's time-ordered log) are copied as slices."""
    if rows.dtype == bool:
        rows = np.flatnonzero(rows)
    runs = row_runs(rows)
    names = list(df.columns) if columns is None else list(columns)
    return frame_of({name: take_column(df[name], rows, runs) for name in names}, df.index[rows])



def _codes(column: pd.Series) -> tuple[np.ndarray, list, bool]:
    """A few-valued column as (codes ≥ 0 in a small integer type, the value of each code, whether code 0 is
    "missing")."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        wide = len(column.cat.categories) >= (1 << 15) - 1
        codes = column.cat.codes.to_numpy().astype(np.int32 if wide else np.int16)
        codes += 1
        return codes, [None, *column.cat.categories], True
    values = column.to_numpy()
    if values.dtype.kind == "b":
        return values.astype(np.int8), [False, True], False
    if values.dtype.kind in "iu" and len(values):
        low, high = int(values.min()), int(values.max())
        if high - low < 1 << 16:  # the difference fits: computed in 32 bits, wrapping as it may on the way
            return np.subtract(values, low, dtype=np.int32, casting="unsafe"), list(range(low, high + 1)), False
    uniques, inverse = np.unique(values, return_inverse=True)
    return inverse.astype(np.int64), uniques.tolist(), False


MAX_GROUP_CODES = 1 << 20  # combinations of key values beyond which pandas' hash grouping does the work
BINCOUNT_ROWS = 1 << 22  # rows counted at once (np.bincount widens what it counts to 64 bits)
SCAN_GROUPS = 16  # groups up to which each group's rows are found by a scan of the codes, not by sorting them


def group_positions(df: pd.DataFrame, keys: list[str], rows: np.ndarray | None = None) -> dict:
    """groupby(keys, observed=True).indices of few-valued columns (categoricals, small integer ranges): a dict
    of ascending positions keyed as pandas keys them (a value for one key, a tuple for several), in the order
    pandas sorts the groups (categories in their order, numbers ascending). One stable counting sort of the
    combined codes (numpy's radix sort below 2^15 codes), or a scan of them per group when there are few:
    several times faster than pandas' grouping on ten million rows. `rows` (ascending positions): group only
    those rows — the positions are still `df`'s."""
    if rows is not None:
        return {key: rows[idx] for key, idx in group_positions(take_rows(df, rows, keys), keys).items()}
    parts = [_codes(df[k]) for k in keys]
    total = int(np.prod([len(values) for _, values, _ in parts], dtype=np.int64))
    if total > MAX_GROUP_CODES:
        return df.groupby(keys if len(keys) > 1 else keys[0], observed=True, sort=True).indices
    combined: np.ndarray = np.zeros(len(df), dtype=np.int16 if total < 1 << 15 else np.int32)  # radix-sorted < 2^15
    for codes, values, _ in parts:
        combined *= len(values)
        combined += codes
    decoders = [(values, has_missing) for _, values, has_missing in parts]
    del parts  # the codes
    counts = sum((np.bincount(combined[i:i + BINCOUNT_ROWS], minlength=total)
                  for i in range(0, len(combined), BINCOUNT_ROWS)), np.zeros(total, dtype=np.int64))
    present = np.flatnonzero(counts).tolist()
    if len(present) <= SCAN_GROUPS:  # a few groups (endpoint × region): one scan each beats the sort, 3–4×
        at = {code: np.flatnonzero(combined == code) for code in present}
    else:
        order, start, at = np.argsort(combined, kind="stable"), 0, {}
        for code in present:
            at[code], start = order[start:start + int(counts[code])], start + int(counts[code])
    del combined
    out = {}
    for code in present:
        key, rest = [], code
        for values, has_missing in reversed(decoders):
            rest, at_value = divmod(rest, len(values))
            key.append(None if has_missing and at_value == 0 else values[at_value])
        if None not in key:  # a missing categorical value: no group, as pandas' dropna
            out[key[0] if len(keys) == 1 else tuple(reversed(key))] = at[code]
    return out


def endpoint_region_positions(df: pd.DataFrame, rows: np.ndarray | None = None) -> dict[tuple[str, str], np.ndarray]:
    """(endpoint, region) → its rows' positions, in (endpoint, region) order: one grouping of a large table,
    shared by the statistics that group by endpoint × region. `rows`: as group_positions'."""
    return dict(sorted(group_positions(df, ["endpoint", "region"], rows).items(),
                       key=lambda kv: (str(kv[0][0]), str(kv[0][1]))))
