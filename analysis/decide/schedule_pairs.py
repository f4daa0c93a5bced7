"""Two runs' requests paired by their place in one schedule (`tailrace compare`'s common random numbers).

A measured request's place is its rank, in intended-send order (ties in row order), among its worker's requests
to its endpoint in its region — a session's turn its own place (session id, turn), since a later turn's instant
depends on the replies, not the schedule. The k-th request of a place in A is paired with the k-th of the same
place in B. Computed on integer codes with numpy: the names of endpoints, regions and workers are matched once
(a 10 M-row pair of runs had taken 14 s and 5 GiB as joined DataFrames of strings)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

PLACE = ("endpoint", "region", "worker")  # named columns of a request's place, then session_id and turn


def _codes_and_names(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Each row's code into `names` (a missing value named "nan", as str() names it)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy().astype(np.int64)
        names = [str(c) for c in column.cat.categories]
    else:
        codes, uniques = pd.factorize(column.astype(str).to_numpy(), use_na_sentinel=True)
        codes, names = codes.astype(np.int64), [str(u) for u in uniques]
    if (codes < 0).any():
        codes = np.where(codes < 0, len(names), codes)
        names.append("nan")
    return codes, names


def shared_codes(a: pd.Series, b: pd.Series) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Two runs' values of one column as codes into their names sorted together: the same name, the same code, and
    codes in the names' string order."""
    (codes_a, names_a), (codes_b, names_b) = _codes_and_names(a), _codes_and_names(b)
    names = sorted(set(names_a) | set(names_b))
    rank = {name: i for i, name in enumerate(names)}
    to_a = np.array([rank[n] for n in names_a], dtype=np.int64)
    to_b = np.array([rank[n] for n in names_b], dtype=np.int64)
    return to_a[codes_a], to_b[codes_b], names


@dataclass(frozen=True)
class Places:
    """One run's measured requests in place order: `rows` (positions in the run's frame) sorted by place, then
    intended send, then row; each place's first index into `rows` and its count, and its key (one array per key
    column, one value per place)."""

    rows: np.ndarray
    starts: np.ndarray
    counts: np.ndarray
    keys: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, measured: np.ndarray, keys: tuple[np.ndarray, ...], t_intended: np.ndarray) -> Places:
        """`keys`: the place's key columns at the `measured` positions (the most significant first)."""
        order = np.lexsort((t_intended, *reversed(keys)))  # lexsort: the last key first, stable (ties: row order)
        sorted_keys = tuple(k[order] for k in keys)
        new = np.ones(len(order), dtype=bool)
        if len(order):
            new[1:] = np.any([k[1:] != k[:-1] for k in sorted_keys], axis=0)
        starts = np.flatnonzero(new)
        counts = np.diff(np.append(starts, len(order)))
        return cls(measured[order], starts, counts, tuple(k[starts] for k in sorted_keys))


def matched(a: Places, b: Places) -> tuple[np.ndarray, np.ndarray]:
    """(A's rows, B's rows) paired: for each place in both, its first min(count in A, count in B) requests, k-th
    with k-th; in A's place order."""
    keys = [np.concatenate([ka, kb]) for ka, kb in zip(a.keys, b.keys)]
    side = np.concatenate([np.zeros(len(a.starts), dtype=np.int8), np.ones(len(b.starts), dtype=np.int8)])
    order = np.lexsort((side, *reversed(keys)))  # each place of A just before the same place of B
    same = np.all([k[order][1:] == k[order][:-1] for k in keys], axis=0) if len(order) > 1 else np.zeros(0, bool)
    pair = same & (side[order][:-1] == 0) & (side[order][1:] == 1)
    in_a, in_b = order[:-1][pair], order[1:][pair] - len(a.starts)
    n = np.minimum(a.counts[in_a], b.counts[in_b])
    offsets = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    return a.rows[np.repeat(a.starts[in_a], n) + offsets], b.rows[np.repeat(b.starts[in_b], n) + offsets]


def place_keys(df: pd.DataFrame, measured: np.ndarray, codes: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """A run's place key columns at `measured`: the shared codes of PLACE, then session id and turn (-1 and 0 where
    the run has none)."""
    session = df["session_id"].to_numpy()[measured] if "session_id" in df else np.full(len(measured), -1, np.int64)
    turn = df["turn"].to_numpy()[measured] if "turn" in df else np.zeros(len(measured), np.int64)
    return (*(codes[c][measured] for c in PLACE), session, turn)
