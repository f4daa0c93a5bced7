"""Which sort numpy does fastest for a log's integers on this CPU. Integers — and distinct ranks — sort to the same
array by any algorithm, so the choice changes the time, never a number. For integers in no order (values within
keys), INTEGER_SORT: where the CPU has AVX-512, numpy's default quicksort is vectorised (x86-simd-sort) and the
faster; elsewhere timsort (docs/DECISIONS.md "Sorts that know what they sort").

A log's times are another matter: a worker's come in one ascending run, jittered by completion order, and a merged
set of them is a few such runs laid end to end — timsort merges those runs in a fraction of quicksort's time, even
the vectorised one (a merged phase's 5 M intended times: 0.05 against 0.33 s). TIME_SORT is for them; INTEGER_SORT
for integers in no such order (values within keys, a shuffle)."""
from __future__ import annotations

from typing import Literal


def _vectorised_quicksort() -> bool:
    """Whether numpy sorts 64-bit integers with its AVX-512 quicksort on this CPU."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # a numpy laid out otherwise: the sort that was never slow
        return False
    return bool(__cpu_features__.get("AVX512_SKX"))


INTEGER_SORT: Literal["quicksort", "stable"] = "quicksort" if _vectorised_quicksort() else "stable"
TIME_SORT: Literal["stable"] = "stable"  # timsort: finds and merges the runs nearly sorted times come in
