"""Ctrl-C and SIGTERM stop a sweep and a capacity search for real: at once, every process they started stopped, what
they measured kept — a sweep resumable, a search's report written from the trials that finished. (Before, the run
of a point or trial swallowed the Ctrl-C and the sweep went on to its next point; a SIGTERM killed the command and
left its servers running.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests import ROOT
from tests.integration.tailrace.test_sweep import profile_text

pytestmark = [pytest.mark.shares_machine, pytest.mark.timeout(300)]  # functional: no timing compared closely


def _started(argv: list[str]) -> subprocess.Popen:
    """`tailrace …` in its own process group with SIGINT's default action, as a terminal's foreground job (a test
    run in the background inherits SIGINT ignored)."""
    return subprocess.Popen([sys.executable, "-m", "tailrace.cli", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _signalled_once_loading(proc: subprocess.Popen, out: Path, runs: str, nth_run: int, sig: signal.Signals
                            ) -> tuple[float, set[int], str]:
    """Once the `nth_run`-th run directory (`out.glob(runs)`) has a worker sending, `sig` to the whole process group (as
    Ctrl-C reaches a terminal's job); (seconds until it exited, the PIDs it had started, its output)."""
    deadline, started = time.monotonic() + 180, set()
    while True:
        assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        children = psutil.Process(proc.pid).children(recursive=True)
        started |= {c.pid for c in children}
        if len(list(out.glob(runs))) >= nth_run and any("--worker" in " ".join(_cmdline(c)) for c in children):
            break
        time.sleep(0.2)
    time.sleep(1.5)  # its load under way
    started |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
    sent = time.monotonic()
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return time.monotonic() - sent, started, proc.stdout.read()


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _left_running(pids: set[int]) -> list[str]:
    """Those of `pids` still running (not zombies), by command line; each is stopped here."""
    alive = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append(" ".join(p.cmdline())[:160])
                p.kill()
        except psutil.Error:
            pass
    return alive


def _holding(root: Path) -> set[int]:
    """PIDs of the processes with a file under `root` open (a server started for the run writes its log there): those a
    snapshot of the command's children, taken before they started, would miss."""
    found = set()
    for p in psutil.process_iter():
        try:
            if any(f.path.startswith(str(root)) for f in p.open_files()):
                found.add(p.pid)
        except psutil.Error:
            pass
    return found


def test_ctrl_c_ends_a_sweep_mid_point_resumably_with_every_process_stopped(model_repo, tmp_path):
    sweep = '[sweep]\n[[sweep.axes]]\nfield = "load.duration_s"\nname = "seconds"\nvalues = [3, 60, 4]\n'
    profile = tmp_path / "sweep.toml"
    profile.write_text(profile_text(model_repo, sweep))
    out = tmp_path / "runs"
    proc = _started(["sweep", str(profile), "--out", str(out)])
    took, started, output = _signalled_once_loading(proc, out, "*/points/*", 2, signal.SIGINT)
    assert proc.returncode == 3 and took < 30, (proc.returncode, took, output[-3000:])
    assert "point 2: interrupted; the sweep ends here" in output and "--resume" in output, output[-3000:]
    assert _left_running(started) == []
    (sweep_dir,) = out.iterdir()
    result = json.loads((sweep_dir / "sweep.json").read_text())
    assert not result["complete"] and [(p["levels"]["seconds"], p["status"]) for p in result["points"]] == [(3, "done")]
    (cut,) = result["interrupted_runs"]
    assert json.loads((sweep_dir / cut / "manifest.json").read_text())["interrupted"]
    assert (sweep_dir / "index.html").exists()


def test_sigterm_ends_a_capacity_search_with_its_report_and_every_process_stopped(model_repo, tmp_path):
    profile = tmp_path / "capacity.toml"
    profile.write_text(f'''name = "cap-stop"
[[endpoints]]
name = "mm1"
url = "embedded"
protocol = "kserve-http"
model = "synthetic_mm1"
[[regions]]
name = "local"
share = 1.0
[load]
rate = 50
duration_s = 5
seed = 3
[embedded]
models_dir = "{model_repo}"
mm1_mean_ms = 2.0
[[slos]]
metric = "latency"
percentile = 99
threshold_ms = 50
[capacity]
start_rate = 50
min_trial_s = 60
max_trial_s = 60
budget_s = 600
''')
    out = tmp_path / "runs"
    proc = _started(["capacity", str(profile), "--out", str(out)])
    took, started, output = _signalled_once_loading(proc, out, "*/trials/*", 1, signal.SIGTERM)
    assert proc.returncode == 3 and took < 30, (proc.returncode, took, output[-3000:])
    assert "interrupted: the search stops after 0 trial(s)" in output, output[-3000:]
    assert _left_running(started) == []
    (cap_dir,) = out.iterdir()
    result = json.loads((cap_dir / "capacity.json").read_text())
    assert (result["status"], result["trials"], result["exit_code"]) == ("stopped", 0, 3), result
    assert result["note"] == "interrupted before the bracket closed: no trial finished"
    (trial,) = (cap_dir / "trials").iterdir()  # the trial cut short, kept
    assert json.loads((trial / "manifest.json").read_text())["interrupted"]


def test_ctrl_c_while_a_runs_server_starts_stops_it_and_says_so_in_one_line(model_repo, tmp_path):
    """Ctrl-C while the embedded endpoint was starting had left it running (its readiness wait stopped it only on a
    RuntimeError), and the run ended 'run did not start', exit 5, as if tailrace had failed."""
    profile = tmp_path / "run.toml"
    profile.write_text(profile_text(model_repo, "").replace("[load]", "[[endpoints]]\nname = \"digits\"\n"
                                                            "url = \"embedded\"\nprotocol = \"kserve-http\"\n"
                                                            "model = \"digits_mlp_fp32\"\n[load]"))
    proc = _started(["run", str(profile), "--out", str(tmp_path / "runs")])
    assert proc.stdout is not None
    started, lines = set(), []
    for line in proc.stdout:  # as soon as it says the endpoint is starting: its readiness wait is under way
        lines.append(line)
        if line.startswith("starting embedded endpoint"):
            break
    started |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
    os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(lines) + proc.stdout.read()
    assert code == 130 and output.rstrip().endswith("tailrace run: interrupted"), (code, output[-2000:])
    assert "Traceback" not in output and "run did not start" not in output, output[-2000:]
    assert started and _left_running(started | _holding(tmp_path / "runs")) == [], output[-2000:]


PROMPTS_LOOP = """
import sys, time
import numpy as np
from tailrace.harness.workload.prompts import Prompts, prompts_of_lengths
rng = np.random.default_rng(1)
print("ready", flush=True)
try:
    end = time.monotonic() + 4
    while time.monotonic() < end:
        prompts_of_lengths(Prompts(), np.full(200, 40), np.ones(200, dtype=int), rng)
    print("NOT INTERRUPTED", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_a_ctrl_c_while_prompts_are_built_is_not_lost():
    """A run builds its prompts before its load starts; str.join over a numpy array of words had swallowed the
    KeyboardInterrupt of a Ctrl-C landing there (15 of 20 times in a tight loop) and the run went on."""
    outcomes = []
    for i in range(6):
        proc = subprocess.Popen([sys.executable, "-c", PROMPTS_LOOP], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.2 + 0.07 * i)
        os.kill(proc.pid, signal.SIGINT)
        outcomes.append(proc.communicate(timeout=30)[0].strip())
    assert outcomes == ["interrupted"] * 6, outcomes


def test_ctrl_c_while_a_worker_waits_for_its_master_ends_it_in_one_line():
    """A worker started before its master (or pointed at the wrong one) waits in Locust's connect loop; a Ctrl-C there
    had printed gevent's "KeyboardInterrupt" and a timestamp, exit 1."""
    from tailrace.harness.services.processes import free_port

    port = free_port()  # nothing listens there
    proc = subprocess.Popen([sys.executable, "-m", "tailrace.cli", "worker", "--master", f"127.0.0.1:{port}", "--region",
                             "eu"], cwd=ROOT, env={**os.environ, "TAILRACE_RUN_TOKEN": "t"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    try:
        assert "Starting Locust" in proc.stdout.readline()  # its locustfile imported: Locust's loop is next
        time.sleep(2.0)
        os.killpg(proc.pid, signal.SIGINT)
        out = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert out.strip().splitlines()[-1] == (f"tailrace worker: interrupted before it reached its master at "
                                             f"127.0.0.1:{port}; nothing was sent"), out
    assert "KeyboardInterrupt" not in out and "Traceback" not in out
