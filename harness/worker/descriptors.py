"""The worker's descriptor table, grown once before the run.

Linux grows a process's descriptor table by doubling it when a new descriptor does not fit (64, 128, 256, ...), and
in a process with threads (a Locust worker's) each growth waits for an RCU grace period (`expand_fdtable` calls
`synchronize_rcu`): the thread opening the socket sleeps 5-15 ms on a 2-core VM. A burst that needs new connections
mid-run crossed one of those sizes and every later row of the burst was sent that much late (docs/DECISIONS.md,
"A burst's new connections"). Growing the table to the pools' size before the start instant takes that sleep out of
the send path; the table never shrinks.
"""
from __future__ import annotations

import fcntl
import os
import resource
from pathlib import Path

DESCRIPTOR_MARGIN = 64  # beyond the pools' connections: files, pipes, the control sockets


def table_size() -> int:
    """This process's descriptor table size now (/proc/self/status FDSize; 0 where the kernel does not say)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("FDSize:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def reserve_descriptors(count: int) -> int:
    """Grow the descriptor table to hold `count` descriptors (at most the soft RLIMIT_NOFILE) now, by placing one
    duplicate at the top and closing it; never closes or moves an open descriptor. Returns the table's size after
    (0: unknown)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = min(count, soft if soft != resource.RLIM_INFINITY else count) - 1
    if top >= 1:
        probe = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.close(fcntl.fcntl(probe, fcntl.F_DUPFD_CLOEXEC, top))  # the lowest free descriptor ≥ top
        except OSError:
            pass  # none free up there (the limit reached): the table grows as it needs, as before
        finally:
            os.close(probe)
    return table_size()


def reserve_for_pools(pools: int, connections: int) -> str:
    """Grow the table for `pools` connection pools of `connections` each and DESCRIPTOR_MARGIN more, before the
    start instant (a growth mid-run sleeps for ms); what was done, for the worker's log."""
    wanted = pools * connections + DESCRIPTOR_MARGIN
    return f"descriptor table: {reserve_descriptors(wanted)} (for {wanted})"
