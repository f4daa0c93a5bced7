"""How busy this machine was during a run, and how much CPU its hypervisor took (steal), from /proc/stat.

On a cloud VM, "steal" is time a runnable vCPU waited for the host: every process on the machine stalls,
generators and the endpoint alike. A few percent of it puts stalls of tens of ms into the latencies.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STEAL_WARNING_FRACTION = 0.02
# /proc/stat "cpu" fields: user nice system idle iowait irq softirq steal (guest time is inside user/nice)
_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU time of the whole machine, in clock ticks, by kind."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def total(self) -> int:
        return self.user + self.nice + self.system + self.idle + self.iowait + self.irq + self.softirq + self.steal


def parse_proc_stat(text: str) -> CpuTimes:
    """The aggregate `cpu` line of /proc/stat (kernels without a steal column count it as 0)."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1:1 + len(_FIELDS)]]
            return CpuTimes(*(values + [0] * (len(_FIELDS) - len(values))))
    raise ValueError("/proc/stat has no aggregate 'cpu' line")


def read_cpu_times(path: Path = Path("/proc/stat")) -> CpuTimes | None:
    """This machine's CPU times now, or None where /proc/stat cannot be read (not Linux)."""
    try:
        return parse_proc_stat(path.read_text())
    except (OSError, ValueError):
        return None


def cpu_usage(before: CpuTimes, after: CpuTimes) -> dict:
    """Fractions of the machine's CPU time between two readings: busy (not idle, not stolen) and steal."""
    total = after.total - before.total
    if total <= 0:
        return {"busy_fraction": None, "steal_fraction": None}
    idle = (after.idle - before.idle) + (after.iowait - before.iowait)
    steal = after.steal - before.steal
    return {"busy_fraction": (total - idle - steal) / total, "steal_fraction": steal / total}


def steal_warning(usage: dict, threshold: float = STEAL_WARNING_FRACTION) -> str | None:
    """A warning when the hypervisor took more than `threshold` of the CPU time during the run."""
    steal = usage.get("steal_fraction")
    if steal is None or steal <= threshold:
        return None
    return (f"this machine's hypervisor took {steal:.1%} of its CPU time during the run (steal, /proc/stat): "
            f"every process here, generators and endpoint alike, stalled now and then, and the latencies "
            f"include those stalls")
