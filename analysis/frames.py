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


def _runs(rows: np.ndarray) -> list[tuple[int, int]] | None:
    """Ascending positions as [start, stop) runs, when there are few of them (then copying slices beats
    gathering row by row); None otherwise."""
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


def _take(values: np.ndarray, rows: np.ndarray, runs: list[tuple[int, int]] | None) -> np.ndarray:
    if runs is None:
        return values[rows]
    return np.concatenate([values[a:b] for a, b in runs]) if runs else values[:0].copy()


def take(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """values[rows] for ascending `rows`, copied as slices when they run contiguously."""
    return _take(values, rows, _runs(rows))


def take_column(column: pd.Series, rows: np.ndarray, runs: list[tuple[int, int]] | None = None) -> object:
    """The values of `column` at ascending positions `rows` (a Categorical stays categorical, by its codes);
    `runs`: the same positions as runs (_runs), when known."""
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
    runs = _runs(rows)
    names = list(df.columns) if columns is None else list(columns)
    return frame_of({name: take_column(df[name], rows, runs) for name in names}, df.index[rows])



def endpoint_region_positions(df: pd.DataFrame) -> dict[tuple[str, str], np.ndarray]:
    """(endpoint, region) → its rows' positions, in (endpoint, region) order: one grouping of a large table,
    shared by the statistics that group by endpoint × region."""
    return dict(sorted(df.groupby(["endpoint", "region"], observed=True, sort=False).indices.items(),
                       key=lambda kv: (str(kv[0][0]), str(kv[0][1]))))
