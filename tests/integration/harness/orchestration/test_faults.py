"""Faults injected for real into a running `tailrace run`: the verdict must never be a wrong PASS."""
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

from tailrace.analysis.analyze import analyze_run
from tailrace.contract.internal_processes import DELAY_PROXY, EMBEDDED_SERVER, SNTP_SERVER
from tests.support import assert_valid, make_profile, run_with, sleep_until_measuring, split_cpus


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
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
    summary = analyze_run(run.run_dir).summary.to_dict()
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


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
@pytest.mark.parametrize("sigint,moment", [("ignored", "mid-run"), ("default", "before-any-request")])
def test_sigterm_to_tailrace_run_stops_every_process_it_started(model_repo, tmp_path, sigint, moment):
    """Endpoint, SNTP reference, delay proxies, master and workers: none outlives `tailrace run`, the run directory
    says the run was interrupted, and it ends promptly — also when it was started with SIGINT ignored, as a shell
    starts a background job (`tailrace run … &`): its master inherited that, ignored the stop, and the load went on
    for 30 s after the signal. Stopped before any request was recorded, it says so in one line (exit 4)."""
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
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint == "ignored" else None
    proc = subprocess.Popen([sys.executable, "-m", "tailrace.cli", "run", str(profile), "--out", str(runs),
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=ignore)
    seen: dict[int, psutil.Process] = {}
    commands: dict[int, list[str]] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the master and both workers run
        for child in _descendants(proc.pid):
            seen[child.pid] = child
            commands[child.pid] = _cmd(child) or commands.get(child.pid, [])
        if sum("--worker" in c for c in commands.values()) == 2:
            break
        time.sleep(0.02)
    workers = [seen[pid] for pid, c in commands.items() if "--worker" in c]
    assert len(workers) == 2, "the run never started"
    if moment == "before-any-request":  # held before they connect (a worker imports for ~1.5 s)
        for w in workers:
            w.suspend()
    while moment == "mid-run" and time.monotonic() < deadline and not list(runs.glob("*/regions/*/*/requests-*")):
        time.sleep(0.2)  # the load is on
    for child in _descendants(proc.pid):
        seen[child.pid] = child
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    for w in workers if moment == "before-any-request" else ():
        w.resume()
    output, _ = proc.communicate(timeout=90)
    took_s = time.monotonic() - signalled
    assert took_s < 20, f"the run went on {took_s:.0f} s after SIGTERM (its schedule is 30 s)\n{output}"
    assert proc.returncode == 4, output  # INVALID: interrupted
    if moment == "before-any-request":
        assert "interrupted before any request was recorded: INVALID" in output, output
    alive = [p for p in seen.values() if _alive(p)]
    assert alive == [], f"left running: {[' '.join(commands[p.pid]) for p in alive]}\n{output}"
    started = {w for c in commands.values() for w in c}  # they were there: each at its own entry point
    assert {EMBEDDED_SERVER, SNTP_SERVER, DELAY_PROXY} <= started, started
    (run_dir,) = runs.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["interrupted"] and not manifest["valid"]


def test_a_jittery_host_is_a_warning_not_invalid_and_a_long_pause_is_named(model_repo, tmp_path):
    """A worker at a low rate, paused for 60 ms five times and sharing its core with a CPU hog, keeps up: VALID
    with a warning. The other worker, paused once for 1.5 s, is INVALID as paused — not 'saturated'."""
    endpoint_cpus, generator_cpus = split_cpus()
    profile = make_profile(model_repo, load={"rate": 100, "duration_s": 10, "warmup_s": 1, "seed": 9},
                           embedded={"models_dir": str(model_repo), "cpus": endpoint_cpus},
                           generator={"cpus": generator_cpus})

    def during(run):
        near, far = run.workers["near-w0"], run.workers["far-w0"]
        sleep_until_measuring(run, 1)
        hog = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 4\nwhile time.time() < end: pass"],
                               preexec_fn=(lambda: os.sched_setaffinity(0, generator_cpus)) if generator_cpus else None)
        for _ in range(5):
            os.kill(near.pid, signal.SIGSTOP)
            time.sleep(0.06)
            os.kill(near.pid, signal.SIGCONT)
            time.sleep(0.6)
        hog.wait(10)
        os.kill(far.pid, signal.SIGSTOP)
        time.sleep(1.5)
        os.kill(far.pid, signal.SIGCONT)

    run, manifest = run_with(profile, tmp_path, during=during)
    reasons = manifest["invalid_reasons"]
    assert not any(r.startswith("near-w0") for r in reasons), reasons
    near = manifest["workers"]["near-w0"]["summary"]
    assert near["warnings"] and "kept up" in near["warnings"][0], near
    far = [r for r in reasons if r.startswith("far-w0")]
    assert far and "paused or stalled for 1." in far[0] and "saturated" not in far[0], reasons


FULL_PROFILE = """
name = "full"
[[endpoints]]
name = "mlp"
url = "embedded"
protocol = "kserve-http"
model = "digits_mlp_fp32"
[[regions]]
name = "solo"
share = 1.0
[load]
rate = 300
duration_s = 12
[embedded]
models_dir = "{model_repo}"
"""


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 20 MiB for the runs directory, unmounted at the end."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def _tailrace_run_on(disk: Path, model_repo: Path, tmp_path: Path, free_bytes: int, env: dict
                     ) -> tuple[subprocess.CompletedProcess, Path, dict, list]:
    """`tailrace run` with `free_bytes` left on `disk`: (the finished process, its run directory, its manifest,
    the processes it started that are still alive)."""
    (disk / "ballast").write_bytes(b"\0" * (20 * 2**20 - free_bytes))
    profile = tmp_path / "p.toml"
    profile.write_text(FULL_PROFILE.format(model_repo=model_repo))
    proc = subprocess.Popen([sys.executable, "-m", "tailrace.cli", "run", str(profile), "--out", str(disk / "runs"),
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    seen: dict[int, psutil.Process] = {}
    while proc.poll() is None:
        for child in _descendants(proc.pid):
            seen[child.pid] = child
        time.sleep(0.2)
    out, err = proc.communicate()
    (run_dir,) = (disk / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    alive = [_cmd(p) for p in seen.values() if _alive(p)]
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), run_dir, manifest, alive


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_full_disk_ends_the_run_cleanly_invalid_and_names_the_file(model_repo, tmp_path, small_disk):
    """No free space kept (TAILRACE_MIN_FREE_MB=0) and 400 kB left: the disk fills during the run. No
    traceback, a message naming a file, a run directory that says the run is INVALID, no process left running."""
    done, run_dir, manifest, alive = _tailrace_run_on(small_disk, model_repo, tmp_path, 400 * 2**10,
                                                      {"TAILRACE_MIN_FREE_MB": "0"})
    assert done.returncode in (1, 4), (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr
    assert alive == [], alive
    assert not manifest["valid"], manifest
    text = done.stderr + done.stdout + " ".join(manifest["invalid_reasons"])
    assert "No space left on device" in text and str(run_dir) in text, text


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_run_stops_while_its_disk_still_holds_the_manifest_and_the_report(model_repo, tmp_path, small_disk):
    """The default reserve (16 MiB) with 16.4 MiB free: the run is stopped as the reserve is reached, before
    any write fails — the end manifest says why (INVALID, exit 4), the report is written, nothing runs on."""
    done, run_dir, manifest, alive = _tailrace_run_on(small_disk, model_repo, tmp_path, 16 * 2**20 + 400 * 2**10, {})
    assert done.returncode == 4, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert alive == [], alive
    assert manifest["state"] == "ended" and not manifest["valid"], manifest
    assert any(r.startswith(f"the run was stopped early: the disk holding {run_dir} has ") and "MiB free" in r
               for r in manifest["invalid_reasons"]), manifest["invalid_reasons"]
    assert "stopping the run" in done.stderr and "No space left" not in done.stderr, done.stderr
    assert (run_dir / "report" / "index.html").stat().st_size > 0


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_masters_run_stops_on_a_nearly_full_disk_and_the_workers_keep_what_it_did_not_write(
        model_repo, endpoint, tmp_path, small_disk):
    """`tailrace master` (its run directory on the small disk, 16.4 MiB free) and a `tailrace worker`: the master
    stops the run at the reserve instead of crashing when a write fails — the end manifest is written and
    says why, the verdict is INVALID (exit 4), the report is there; every chunk the worker closed is in the run
    directory or its spool (`tailrace collect` adds the rest)."""
    from tailrace.command_lines import tailrace_argv
    from tailrace.harness.services.processes import free_port, start_process
    from tests.support import remote_profile_toml

    (small_disk / "ballast").write_bytes(b"\0" * (20 * 2**20 - (16 * 2**20 + 400 * 2**10)))  # 16.4 MiB free
    profile = tmp_path / "master.toml"
    profile.write_text(remote_profile_toml(
        "disk", [("mlp", endpoint.http_url, "kserve-http", "digits_mlp_fp32", model_repo / "_data" / "digits_test.npz")],
        {"us": 1.0}, rate=300, duration_s=20, seed=9))
    token = tmp_path / "token"
    token.write_text("a-run-token-for-the-disk-test")
    port, sntp = free_port("127.0.0.1"), free_port("127.0.0.1")
    master = start_process("master", tailrace_argv("master", str(profile), "--out", str(small_disk / "runs"), "--port",
                                                   str(port), "--sntp-port", str(sntp), "--token-file", str(token),
                                                   "--wait-s", "60", "--quiet"), tmp_path / "master.log")
    spool = tmp_path / "spool"
    worker = start_process("worker", tailrace_argv("worker", "--master", f"127.0.0.1:{port}", "--region", "us",
                                                   "--token-file", str(token), "--spool", str(spool)),
                           tmp_path / "worker.log")
    try:
        code = master.popen.wait(timeout=120)
        worker.popen.wait(timeout=30)
    finally:
        worker.stop()
        master.stop()
    log = (tmp_path / "master.log").read_text()
    assert code == 4, log[-3000:]
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]
    assert "stopping the run" in log, log[-3000:]
    (run_dir,) = (small_disk / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["state"] == "ended" and not manifest["valid"], manifest
    assert any(r.startswith("the run was stopped early: the disk holding") for r in manifest["invalid_reasons"])
    assert (run_dir / "report" / "index.html").exists()
    closed = {p.name for p in spool.rglob("requests-*.parquet")}
    written = {p.name for p in run_dir.rglob("requests-*.parquet")}
    assert written and closed and written <= closed  # what reached the run is what the worker closed


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_capacity_search_on_a_disk_below_the_reserve_starts_nothing(model_repo, tmp_path, small_disk, capsys,
                                                                      monkeypatch):
    """1 MiB free, under the 16 MiB reserve: `tailrace capacity` refuses before any server or trial starts —
    one line naming the disk, exit 2, no process left; a malformed reserve is one line naming the variable."""
    from tailrace.capacity import capacity_command
    from tests.integration.tailrace.test_capacity import mm1_profile

    (small_disk / "ballast").write_bytes(b"\0" * (19 * 2**20))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    code = capacity_command(mm1_profile(model_repo), small_disk / "runs", quiet=True, budget_s=None)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("tailrace capacity: the disk holding ") and "no load was sent" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert {p.pid for p in psutil.Process().children(recursive=True)} == before
    (cap_dir,) = (small_disk / "runs").iterdir()
    assert list((cap_dir / "trials").iterdir()) == [] and not (cap_dir / "logs").exists()

    monkeypatch.setenv("TAILRACE_MIN_FREE_MB", "lots")
    code = capacity_command(mm1_profile(model_repo), tmp_path / "runs", quiet=True, budget_s=None)
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == "tailrace capacity: TAILRACE_MIN_FREE_MB='lots': expected a number of MiB", err


def test_a_master_paused_8_s_mid_run_loses_nothing_and_the_gap_is_named(model_repo, tmp_path):
    """The Locust master SIGSTOPped for 8 s, then SIGCONT (a GC pause, a VM stall): the workers keep their schedules
    (generator.master_timeout_s is 30 s), every planned request is sent, every row is in the run directory, the run
    is VALID, and each worker's silence of the master is named in the manifest and the report."""
    profile = make_profile(model_repo, load={"rate": 100, "duration_s": 16, "warmup_s": 1, "seed": 8},
                           slos=[{"metric": "latency", "percentile": 50, "threshold_ms": 1000}])
    paused = {}

    def during(run):
        sleep_until_measuring(run, 4)
        os.kill(run.master.pid, signal.SIGSTOP)
        paused["at"] = time.time()
        time.sleep(8)
        os.kill(run.master.pid, signal.SIGCONT)

    run, manifest = run_with(profile, tmp_path, during=during)
    assert "at" in paused
    assert_valid(manifest)
    workers = manifest["workers"]
    assert all(w["summary"]["sent"] == w["summary"]["planned"] > 0 for w in workers.values()), workers
    gaps = [w for w in manifest["warnings"] if "no contact with the master for" in w]
    assert len(gaps) == len(workers), manifest["warnings"]
    lengths = [float(g.split("for ")[1].split(" s")[0]) for g in gaps]
    assert all(5 < x < 11 for x in lengths), gaps
    summary = analyze_run(run.run_dir).summary.to_dict()
    assert summary["valid"] and summary["input"]["rows_read"] == sum(w["summary"]["planned"] for w in workers.values())
    assert any("no contact with the master" in w for w in summary["warnings"])
    from tailrace.contract.master_events import MASTER_STALLED, read_master_events

    stalls = MASTER_STALLED.among(read_master_events(run.layout))
    assert stalls and 5 < stalls[0]["gap_s"] < 11, stalls
