"""Machine CPU use and hypervisor steal over a run, from /proc/stat."""
from __future__ import annotations

import pytest

from tailrace.harness.orchestration.host_cpu import cpu_usage, parse_proc_stat, read_cpu_times, steal_warning

BEFORE = "cpu  1000 10 300 8000 50 0 40 100 0 0\ncpu0 500 5 150 4000 25 0 20 50 0 0\nintr 12345\n"
AFTER = "cpu  1600 10 400 8700 50 0 40 300 0 0\ncpu0 800 5 200 4350 25 0 20 150 0 0\nintr 23456\n"


def test_steal_and_busy_fractions_between_two_readings():
    usage = cpu_usage(parse_proc_stat(BEFORE), parse_proc_stat(AFTER))
    # Δ: user 600, system 100, idle 700, steal 200 → total 1600
    assert usage["steal_fraction"] == pytest.approx(200 / 1600)
    assert usage["busy_fraction"] == pytest.approx(700 / 1600)
    warning = steal_warning(usage)
    assert warning and "12.5%" in warning and "steal" in warning


def test_no_warning_on_a_quiet_host_and_old_kernels_without_steal():
    quiet = cpu_usage(parse_proc_stat("cpu 100 0 50 1000 0 0 0 1\n"), parse_proc_stat("cpu 200 0 60 2000 0 0 0 2\n"))
    assert quiet["steal_fraction"] == pytest.approx(1 / 1111) and steal_warning(quiet) is None
    assert parse_proc_stat("cpu 1 2 3 4\n").steal == 0
    assert cpu_usage(parse_proc_stat(BEFORE), parse_proc_stat(BEFORE))["steal_fraction"] is None
    with pytest.raises(ValueError):
        parse_proc_stat("intr 1\n")


def test_reads_this_machine(tmp_path):
    now = read_cpu_times()
    assert now is not None and now.total > 0  # CI runs on Linux
    assert read_cpu_times(tmp_path / "missing") is None
