"""A worker that fails authentication takes nothing: `tailrace master` for two regions and real `tailrace worker`
processes, each in a directory of its own, one of them with a wrong run token — connecting first, last, or at the
same moment as the right one — and a flood of 50 wrong connections during a run. The right workers run, the run is
VALID, the master's memory and CPU stay bounded, and each refusal is logged once per address with a count."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from tailrace.command_lines import master_args, tailrace_argv, worker_args
from tailrace.harness.services.processes import ManagedProcess, free_port, start_process
from tests.support import remote_profile_toml

WRONG = "wrong run token (set TAILRACE_RUN_TOKEN or --token-file to the master's)"
FLOOD = 50


@dataclass
class Master:
    process: ManagedProcess
    port: int
    out: Path
    token: Path

    def events(self) -> list[dict]:
        runs = [p for p in self.out.iterdir() if p.is_dir()] if self.out.exists() else []
        path = runs[0] / "master-events.jsonl" if runs else None
        if path is None or not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]

    def run_dir(self) -> Path:
        [run] = [p for p in self.out.iterdir() if p.is_dir()]
        return run


def start_master(endpoint, model_repo: Path, root: Path, duration_s: float) -> Master:
    profile = root / "two-regions.toml"
    profile.write_text(remote_profile_toml(
        "admission", [("mlp", endpoint.http_url, "kserve-http", "digits_mlp_fp32",
                       model_repo / "_data" / "digits_test.npz")], {"r1": 0.5, "r2": 0.5},
        rate=60, duration_s=duration_s, seed=5))
    token = root / "token"
    token.write_text("the-right-run-token")
    port, sntp = free_port("127.0.0.1"), free_port("127.0.0.1")
    out = root / "runs"
    process = start_process("master", tailrace_argv(*master_args(
        str(profile), bind="127.0.0.1", port=port, sntp_port=sntp, out=str(out), wait_s=90, token_file=str(token),
        quiet=True)), root / "master.log")
    return Master(process, port, out, token)


def start_worker(master: Master, root: Path, name: str, region: str, right: bool) -> ManagedProcess:
    """`tailrace worker` in a directory of its own (its spool there), with the master's token or a wrong one."""
    home = root / name
    home.mkdir()
    token = master.token
    if not right:
        token = home / "token"
        token.write_text("not-the-run-token")
    return start_process(name, tailrace_argv(*worker_args(master=f"127.0.0.1:{master.port}", region=region,
                                                          token_file=str(token), spool=str(home / "spool"))),
                         root / f"{name}.log", cwd=home)


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def finish(master: Master, workers: dict[str, ManagedProcess], root: Path) -> int:
    try:
        code = master.process.popen.wait(timeout=150)
        for w in workers.values():
            w.popen.wait(timeout=30)
    finally:
        for w in workers.values():
            w.stop()
        master.process.stop()
    return code


def assert_the_right_workers_ran(master: Master, root: Path, code: int, refusals: int = 1) -> list[dict]:
    log = (root / "master.log").read_text()
    run = master.run_dir()
    manifest = json.loads((run / "manifest.json").read_text())
    # an INVALID run names its reasons (a starved generator's stall, a worker that never ran…) beside the log's end
    assert code == 0, (manifest.get("invalid_reasons"), log[-3000:])
    assert manifest["valid"], manifest.get("invalid_reasons")
    for region in ("r1", "r2"):
        rows = sum(pq.ParquetFile(p).metadata.num_rows for p in (run / "regions" / region).rglob("requests-*.parquet"))
        assert rows > 100, (region, rows)
    events = master.events()
    assert sorted(e["worker"] for e in events if e["event"] == "worker_admitted") == ["r1-w0", "r2-w0"]
    refused = [e for e in events if e["event"] == "worker_refused"]
    assert [e["reason"] for e in refused] == [WRONG] * refusals, refused
    wrong_log = (root / "wrong.log").read_text()
    assert "the master refused this worker: wrong run token" in wrong_log, wrong_log[-2000:]
    assert "Traceback" not in log, log[-3000:]
    return events


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_worker_with_a_wrong_token_first_or_last_takes_no_place(endpoint, model_repo, tmp_path):
    """A wrong r1 connects first (and is refused before anyone else connects), then the right r2 and r1, then a
    second wrong r1 last: the master waits for the right r1 and gives it its place."""
    master = start_master(endpoint, model_repo, tmp_path, duration_s=4)
    workers: dict[str, ManagedProcess] = {"wrong": start_worker(master, tmp_path, "wrong", "r1", right=False)}
    wait_for(lambda: any(e["event"] == "worker_refused" for e in master.events()), 60, "the wrong worker's refusal")
    workers["r2"] = start_worker(master, tmp_path, "r2", "r2", right=True)
    workers["r1"] = start_worker(master, tmp_path, "r1", "r1", right=True)
    workers["wrong-last"] = start_worker(master, tmp_path, "wrong-last", "r1", right=False)
    code = finish(master, workers, tmp_path)
    assert workers["wrong"].popen.returncode == 2 and workers["wrong-last"].popen.returncode == 2
    assert "the master refused this worker: wrong run token" in (tmp_path / "wrong-last.log").read_text()
    events = assert_the_right_workers_ran(master, tmp_path, code)
    # both from this host, for one reason: the first logged, the second counted
    assert [e["count"] for e in events if e["event"] == "worker_refusals"] == [2]


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_wrong_worker_at_the_same_moment_and_a_flood_of_wrong_ones_take_nothing(endpoint, model_repo, tmp_path):
    """The wrong r1, the right r1 and r2 started together (the issue's case: the run went INVALID, r1's worker
    idle); then, once the run has started, 50 wrong connections: each refused, logged once for its address with a
    count, and the run stays VALID with the master's memory and CPU bounded."""
    master = start_master(endpoint, model_repo, tmp_path, duration_s=7)
    workers = {name: start_worker(master, tmp_path, name, region, right)
               for name, region, right in (("wrong", "r1", False), ("r1", "r1", True), ("r2", "r2", True))}
    wait_for(lambda: any(e["event"] == "plan_sent" for e in master.events()), 90, "the plan to go out")
    processes = _tree(master.process.popen.pid)
    rss_before = sum(p.memory_info().rss for p in processes)
    cpu_before = sum(sum(p.cpu_times()[:2]) for p in processes)
    flood = start_process("flood", [sys.executable, "-m", "tests.integration.harness.control.flood_client",
                                    "127.0.0.1", str(master.port), str(FLOOD)], tmp_path / "flood.log",
                          cwd=Path(__file__).parents[4])
    try:
        assert flood.popen.wait(timeout=120) == 0, (tmp_path / "flood.log").read_text()[-2000:]
        rss_after = sum(p.memory_info().rss for p in processes if p.is_running())
        cpu_after = sum(sum(p.cpu_times()[:2]) for p in processes if p.is_running())
    finally:
        flood.stop()
    assert f"refused {FLOOD} of {FLOOD}" in (tmp_path / "flood.log").read_text()
    code = finish(master, workers, tmp_path)
    assert workers["wrong"].popen.returncode == 2
    events = assert_the_right_workers_ran(master, tmp_path, code, refusals=2)
    flooded = [e for e in events if e["event"] == "worker_refused" and e["address"] == "flood-host"]
    assert len(flooded) == 1  # once for its address; the rest counted
    counts = [e["count"] for e in events if e["event"] == "worker_refusals" and e["address"] == "flood-host"]
    assert counts and counts[-1] == FLOOD, counts
    # bounded: far from what 50 refusals could cost a leak (each is a counter and a REFUSED)
    assert rss_after - rss_before < 64 * 2**20, (rss_before, rss_after)
    assert cpu_after - cpu_before < 30, (cpu_before, cpu_after)
