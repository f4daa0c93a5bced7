"""Statistics computed over groups in threads where the log fits or a group's temporaries are small, else in the calling
thread."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_in_threads(compute: Callable[[T], R], items: Iterable[T], threads: int) -> list[R]:
    """[compute(item) for item in items], by `threads` threads (numpy's sorts and reductions release the GIL); with
    one, in the calling thread — a long run's statistics do where each group makes temporaries its size, so that
    its peak holds one group's at a time (the decomposition, whose legs are summed a block at a time, does not)."""
    items = list(items)
    if threads <= 1 or len(items) <= 1:
        return [compute(item) for item in items]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(compute, items))
