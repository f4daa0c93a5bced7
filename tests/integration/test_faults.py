"""Faults injected for real into a running `tailrace run`: the verdict must never be a wrong PASS."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil

from analysis.analyze import analyze_run
from tests.support import make_profile, run_with, sleep_until_measuring


def test_a_master_killed_mid_run_makes_the_run_invalid_with_the_numbers(model_repo, tmp_path):
    profile = make_profile(model_repo, load={"rate": 120, "duration_s": 12, "warmup_s": 1, "seed": 5},
                           slos=[{"metric": "latency", "percentile": 50, "threshold_ms": 1000}])
    killed = {}

    def during(run):
        sleep_until_measuring(run, 3)
        killed["t"] = time.time()
        os.kill(run.master.pid, signal.SIGKILL)

    run, manifest = run_with(profile, tmp_path, during=during)
    assert "t" in killed
    assert not manifest["valid"]
    lost = [r for r in manifest["invalid_reasons"] if r.startswith("master lost at +")]
    assert lost and "Locust master exited with -9" in lost[0] and "planned requests sent" in lost[0], manifest
    assert any("planned requests (" in r for r in manifest["invalid_reasons"])  # each worker's shortfall
    summary = analyze_run(run.run_dir).summary
    assert (summary["verdict"], summary["exit_code"]) == ("INVALID", 4)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _cmd(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_sigterm_to_tailrace_run_stops_every_process_it_started(model_repo, tmp_path):
    """Endpoint, SNTP reference, delay proxies, master and workers: none outlives `tailrace run`, and the run
    directory says the run was interrupted."""
    profile = tmp_path / "p.toml"
    profile.write_text(f"""
name = "sigterm"
[[endpoints]]
name = "mlp"
url = "embedded"
protocol = "kserve-http"
model = "digits_mlp_fp32"
[[regions]]
name = "near"
share = 0.5
delay_ms = 2
[[regions]]
name = "far"
share = 0.5
delay_ms = 10
[load]
rate = 50
duration_s = 30
[embedded]
models_dir = "{model_repo}"
""")
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "tailrace.cli", "run", str(profile), "--out", str(runs),
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[int, psutil.Process] = {}
    commands: dict[int, list[str]] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the master and both workers run
        for child in _descendants(proc.pid):
            seen[child.pid] = child
            commands[child.pid] = _cmd(child) or commands.get(child.pid, [])
        if sum("--worker" in c for c in commands.values()) == 2:
            break
        time.sleep(0.2)
    assert sum("--worker" in c for c in commands.values()) == 2, "the run never started"
    time.sleep(2)
    for child in _descendants(proc.pid):
        seen[child.pid] = child
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=90)
    alive = [p for p in seen.values() if _alive(p)]
    assert alive == [], f"left running: {[' '.join(commands[p.pid]) for p in alive]}\n{output}"
    assert {"serve", "sntp", "proxy"} <= {w for c in commands.values() for w in c}  # they were there
    (run_dir,) = runs.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["interrupted"] and not manifest["valid"]
