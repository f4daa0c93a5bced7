"""The free space a run directory's disk keeps: below it, the orchestrator stops the run while the manifest,
the last server statistics and the report still fit, instead of running on until a write fails.

Workers keep every chunk the master has not acknowledged in their spools (harness/spool/uplink.py), so a run
stopped this way loses nothing already measured: `tailrace collect` adds those chunks once there is room.
"""
from __future__ import annotations

import os
from pathlib import Path

MIN_FREE_BYTES = 16 * 2**20  # the end manifest, the last statistics and the report (its plots) fit in this
RESERVE_ENV = "TAILRACE_MIN_FREE_MB"  # overrides MIN_FREE_BYTES (in MiB), for a disk sized to the run


class LowDiskError(RuntimeError):
    """The run directory's disk is already below the reserve: nothing was started."""


def min_free_bytes() -> int:
    """The free space to keep (MIN_FREE_BYTES, or $TAILRACE_MIN_FREE_MB)."""
    value = os.environ.get(RESERVE_ENV)
    if value is None:
        return MIN_FREE_BYTES
    try:
        mib = float(value)
    except ValueError:
        raise ValueError(f"{RESERVE_ENV}={value!r}: expected a number of MiB") from None
    if mib < 0:
        raise ValueError(f"{RESERVE_ENV}={value!r}: expected a number of MiB ≥ 0")
    return int(mib * 2**20)


def low_disk_reason(run_dir: Path, reserve: int) -> str | None:
    """Why the run must stop — the disk holding `run_dir` has less than `reserve` bytes free — or None."""
    try:
        stat = os.statvfs(run_dir)
    except OSError:
        return None  # the directory's writes will say what is wrong
    free = stat.f_bavail * stat.f_frsize
    if free >= reserve:
        return None
    return (f"the disk holding {run_dir} has {free / 2**20:.1f} MiB free (below the {reserve / 2**20:.0f} MiB kept "
            f"for the manifest and the report)")


def stop_reason(stats, run_dir: Path, reserve: int, monitors=None) -> str | None:
    """Checked every half second by both orchestrators: why the run must stop now — its server statistics or its
    hardware monitors' scrapes could not be appended (`stats`: a ServerStatsRecorder or None; `monitors`: a
    MonitorRecorder or None), or its disk is below the reserve — or None."""
    try:
        if stats is not None and stats.due():
            stats.periodic()
        if monitors is not None:
            monitors.periodic()
    except OSError as exc:
        return f"the run directory cannot be written ({exc})"
    return low_disk_reason(run_dir, reserve)
