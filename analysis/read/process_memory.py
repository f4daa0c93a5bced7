"""How a process that analyses a large run gets its memory from the kernel (glibc on Linux; elsewhere nothing).

The analysis makes many short-lived arrays of ten million rows. By default glibc maps each one afresh (above its
32 MB mmap limit) and numpy asks for transparent huge pages, so the kernel zeroes a new 2 MB page for every
first write: measured with perf on a 10 M-row `tailrace analyze`, a third of the run's CPU time was the kernel
clearing pages (clear_page_erms). Serving large blocks from the heap, keeping freed memory for reuse and using
4 KB pages made the same analysis take ~35 % less time at about the same peak RSS (docs/BENCHMARKS.md).
Applied only by processes that analyse and then exit (tailrace analyze / compare, a master after its run): memory
freed is kept by the process, never returned to the system before it exits — a day's run too (docs/DECISIONS.md
"Memory from the kernel": handing it back as columns were released cost a fifth more time for a peak 0.2–0.5 GiB
lower; past 2 GiB free at the heap's top, a 200 M-row run's columns went back and came again as fresh pages).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_MAX = -4
M_ARENA_MAX = -8
PR_SET_THP_DISABLE = 41  # linux/prctl.h
NEVER_TRIM = -1  # mallopt's M_TRIM_THRESHOLD of -1: the heap's top is never handed back (mallopt(3))


def reuse_freed_memory() -> dict[str, object]:
    """Serve large blocks from the heap, keep freed memory (the heap's top never trimmed), one heap for every thread, no
    transparent huge pages; returns the effective settings (empty where they do not apply: not Linux, or not glibc).
    Threads otherwise get heaps of their own (glibc's arenas), of at most 64 MB each, and theirs hand freed memory back —
    a block over 64 MB a thread asks for is even mapped afresh and unmapped when freed, whatever the heap's
    settings: the statistics computed in threads (analysis/analyze.py) had the kernel zeroing pages again.
    Call it before any other thread of the process allocates (settle): glibc fixes its limit on heaps once, at a
    thread's first allocation — set after a library's thread had started, the one-heap setting did nothing
    (docs/DECISIONS.md "Memory from the kernel")."""
    if not sys.platform.startswith("linux"):
        return {}
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        mallopt, prctl = libc.mallopt, libc.prctl
    except (OSError, AttributeError):  # musl and other libcs have no mallopt: their defaults stay
        return {}
    effective: dict[str, object] = {"malloc_mmap_max": 0 if mallopt(M_MMAP_MAX, 0) == 1 else "unchanged",
                 "malloc_trim_threshold": "never" if mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) == 1 else "unchanged",
                 "malloc_arena_max": 1 if mallopt(M_ARENA_MAX, 1) == 1 else "unchanged",
                 "transparent_huge_pages": "off" if prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0 else "unchanged"}
    log.debug("analysis memory settings: %s", effective)
    return effective


def settle() -> dict[str, object]:
    """The settings for a process that is about to analyse and then exit: reuse_freed_memory. The one place the
    policy is chosen (analysis/analyze_command.py, analysis/decide/compare.py, analysis/warm_report.py), called
    first, before the process starts a thread or reads a chunk (Arrow's threads allocate too)."""
    return reuse_freed_memory()
