"""`tailrace compare`'s energy: per monitor × measured phase (and per monitor × endpoint × phase, where a monitor
says one endpoint's share), B's energy per request − A's, with a 95% interval.

Each run's phase is cut in equal parts (analysis/stats/hardware/windows.py): in each, the energy counter's rise per
request sent in it. The parts are the samples: Δ is the difference of their means, its interval Welch's t over them
(the parts are seconds apart, so neighbouring parts' correlation through a request in flight across an edge is
small). Measured joules are compared only with measured joules, an estimate only with the same estimate — labelled.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import stats

from tailrace.analysis.decide.variants import endpoint_serving, monitor_scopes
from tailrace.analysis.read.clock_correction import add_reference_times, fit_all
from tailrace.analysis.read.hardware import monitor_series
from tailrace.analysis.read.rundir import RunData, load_run
from tailrace.analysis.stats.hardware.usage import hardware_section
from tailrace.analysis.stats.hardware.windows import phase_windows
from tailrace.contract.summary.compare import EnergyDelta
from tailrace.contract.summary.tables import Hardware, HardwareEndpointRow, HardwareRow

MIN_WINDOWS = 3
READ = ("phase", "status", "endpoint", "worker", "t_intended", "t_sent", "t_done", "clock_offset_ns",
        "server_compute_ns", "output_tokens")  # HARDWARE_COLUMNS on the reference clock
BASES = (("energy_per_request_mj_windows", "measured"), ("estimated_energy_per_request_mj_windows", "estimate"))


def welch_difference(a: list[float], b: list[float]) -> dict:
    """mean(b) − mean(a) with Welch's 95% interval (None without MIN_WINDOWS samples each) — pure."""
    out = {"mean_a_mj": float(np.mean(a)) if a else None, "mean_b_mj": float(np.mean(b)) if b else None,
           "diff_mj": None, "ci_low": None, "ci_high": None, "windows_a": len(a), "windows_b": len(b)}
    if len(a) < MIN_WINDOWS or len(b) < MIN_WINDOWS:
        return out
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    diff = float(np.mean(b)) - float(np.mean(a))  # (both there: MIN_WINDOWS each)
    se = float(np.sqrt(va + vb))
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if va + vb > 0 else len(a) + len(b) - 2
    half = float(stats.t.ppf(0.975, dof)) * se
    return out | {"diff_mj": diff, "ci_low": diff - half, "ci_high": diff + half,
                  "relative": diff / out["mean_a_mj"] if out["mean_a_mj"] else None}


def run_hardware(data: RunData) -> Hardware | None:
    """A run's hardware section, as `tailrace analyze` makes it (the endpoints' slots without batching seen)."""
    frame = add_reference_times(data.requests, fit_all(data.clock))
    return hardware_section(monitor_series(data), phase_windows(frame), monitor_scopes(data.plan.profile),
                            endpoint_serving(data.plan, []))


def _keyed(section: Hardware | None) -> dict[tuple[str, str, int], HardwareRow | HardwareEndpointRow]:
    rows: dict[tuple[str, str, int], HardwareRow | HardwareEndpointRow] = \
        {(r.monitor, "*", r.phase): r for r in (section.rows if section else [])}
    return rows | {(r.monitor, r.endpoint, r.phase): r for r in (section.endpoints if section else [])}


def compare_energy(run_a: Path, run_b: Path) -> list[EnergyDelta]:
    """One row per monitor (× endpoint) × phase both runs measured with the same basis ([]: neither has monitors)."""
    loaded = []
    for run in (run_a, run_b):
        data = load_run(run, READ)
        if not data.plan.profile.monitors:
            return []
        loaded.append(_keyed(run_hardware(data)))
    a, b = loaded
    out = []
    for key in sorted(set(a) & set(b), key=lambda k: (k[0], k[1] != "*", k[1], k[2])):
        for field, basis in BASES:
            parts_a, parts_b = getattr(a[key], field), getattr(b[key], field)
            if parts_a and parts_b:
                monitor, endpoint, phase = key
                out.append(EnergyDelta(monitor=monitor, endpoint=endpoint, phase=phase, basis=basis,
                                       **welch_difference(parts_a, parts_b)))
                break
    return out


def energy_table(rows: list[EnergyDelta], run_a: Path, run_b: Path):
    """The terminal's table of `compare_energy`'s rows."""
    from rich.table import Table

    table = Table(title=f"energy per request, B = {run_b.name} vs A = {run_a.name} (mJ, B − A, 95% CI over each "
                        "phase's equal parts; ≈ an estimate)")
    for col in ("monitor", "endpoint", "phase", "A mJ", "B mJ", "Δ mJ [95% CI]", "parts A/B"):
        table.add_column(col, justify="right")
    for r in rows:
        mark = "≈ " if r.basis == "estimate" else ""
        diff = "too few parts" if r.diff_mj is None else f"{mark}{r.diff_mj:+.3g} [{r.ci_low:+.3g}, {r.ci_high:+.3g}]"
        table.add_row(r.monitor, r.endpoint, str(r.phase), f"{mark}{r.mean_a_mj:.3g}", f"{mark}{r.mean_b_mj:.3g}",
                      diff, f"{r.windows_a}/{r.windows_b}")
    return table
