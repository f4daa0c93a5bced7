"""Regional generators on separate hosts, for real on this machine: network namespaces joined by a bridge that
lives only in a namespace this test creates (10.203.0.0/16 inside them only, no default route), one namespace
for the master, one for the endpoint, one per region worker. Each process runs in its namespace with the
commands a deployment runs (`tailrace serve`, `tailrace master`, `tailrace worker`); each worker's spool is its
own directory; region delay is the userspace delay proxy inside the region's namespace. Everything is torn
down at the end."""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from tailrace.command_lines import master_args, worker_args
from tailrace.contract.exit_codes import WORKER_MASTER_LOST
from tailrace.contract.layout import RunLayout
from tailrace.harness.services.processes import ManagedProcess, start_process
from tests.support import IN_CI, assert_valid, browser_page, chromium, remote_profile_toml

MASTER_IP, ENDPOINT_IP = "10.203.0.1", "10.203.0.2"
UI_PORT = 18089  # the master's live page, on its own host
REGION_IPS = {"eu": "10.203.0.11", "us": "10.203.0.12", "stray": "10.203.0.13"}
MASTER_PORT, SNTP_PORT = 5557, 12300


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)


@dataclass
class Network:
    """Namespaces `<prefix>-<host>` plus `<prefix>-br` holding the bridge; veth pairs host ↔ bridge."""

    prefix: str
    hosts: dict[str, str]  # host → its address
    created: list[str] = field(default_factory=list)

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def up(self) -> None:
        bridge = self.ns("br")
        sh("ip", "netns", "add", bridge)
        self.created.append(bridge)
        sh("ip", "netns", "exec", bridge, "ip", "link", "add", "br0", "type", "bridge")
        sh("ip", "netns", "exec", bridge, "ip", "link", "set", "br0", "up")
        for i, (host, address) in enumerate(self.hosts.items()):
            ns = self.ns(host)
            sh("ip", "netns", "add", ns)
            self.created.append(ns)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            # the pair is created inside the bridge namespace and one end moved: nothing touches the host's links
            sh("ip", "netns", "exec", bridge, "ip", "link", "add", f"p{i}", "type", "veth", "peer", "name", f"h{i}")
            sh("ip", "netns", "exec", bridge, "ip", "link", "set", f"h{i}", "netns", ns)
            sh("ip", "netns", "exec", bridge, "ip", "link", "set", f"p{i}", "master", "br0")
            sh("ip", "netns", "exec", bridge, "ip", "link", "set", f"p{i}", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", f"h{i}", "name", "eth0")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{address}/16", "dev", "eth0")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")

    def down(self) -> None:
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self.created.clear()

    def start(self, host: str, name: str, args: list[str], log: Path, env: dict | None = None,
              cwd: Path | None = None) -> ManagedProcess:
        return start_process(name, ["ip", "netns", "exec", self.ns(host), sys.executable, "-m", "tailrace.cli", *args],
                             log, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def network():
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("separate hosts need network namespaces: run the tests as root (CI does)")
        pytest.skip("network namespaces need root")
    net = Network(f"tr{os.getpid() % 100000}", {"m": MASTER_IP, "e": ENDPOINT_IP, "eu": REGION_IPS["eu"],
                                                 "us": REGION_IPS["us"], "stray": REGION_IPS["stray"]})
    try:
        net.up()
    except (subprocess.CalledProcessError, OSError) as exc:
        net.down()
        pytest.fail(f"cannot create network namespaces here: {getattr(exc, 'stderr', '') or exc}")
    yield net
    net.down()
    assert not [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                if n.startswith(net.prefix)]


@pytest.fixture(scope="module")
def served(network, model_repo, tmp_path_factory):
    logs = tmp_path_factory.mktemp("hosts")
    endpoint = network.start("e", "endpoint", ["serve", "--models", str(model_repo), "--host", ENDPOINT_IP, "--expose",
                                               "--http-port", "8000", "--grpc-port", "8001"], logs / "endpoint.log")
    proxies = [network.start(region, f"proxy {region}", [
        "proxy", "--route", f"127.0.0.1:18000={ENDPOINT_IP}:8000", "--route", f"127.0.0.1:18001={ENDPOINT_IP}:8001",
        "--delay-ms", delay, "--jitter-ms", "0.5"], logs / f"proxy-{region}.log")
        for region, delay in (("eu", "3"), ("us", "12"))]
    deadline = time.time() + 60
    while time.time() < deadline:
        probe = subprocess.run(["ip", "netns", "exec", network.ns("m"), sys.executable, "-m", "tailrace.cli", "probe",
                                f"http://{ENDPOINT_IP}:8000", "--model", "digits_mlp_fp32", "--requests", "1"],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            break
        time.sleep(1)
    else:
        pytest.fail(f"endpoint in its namespace never answered: {probe.stdout}{probe.stderr}")
    yield logs
    for p in [endpoint, *proxies]:
        p.stop()


def profile_text(model_repo: Path, duration_s: float, master_timeout_s: float | None = None) -> str:
    data = model_repo / "_data" / "digits_test.npz"
    return remote_profile_toml("hosts", [("mlp-http", f"http://{ENDPOINT_IP}:8000", "kserve-http", "digits_mlp_fp32", data),
                                         ("mlp-grpc", f"grpc://{ENDPOINT_IP}:8001", "kserve-grpc", "digits_mlp_fp32", data)],
                               {"eu": 0.5, "us": 0.5}, rate=80, duration_s=duration_s, seed=4,
                               master_timeout_s=master_timeout_s, file_seconds=1)  # (files in the spool mid-run)


@dataclass
class Deployment:
    master: ManagedProcess
    workers: dict[str, ManagedProcess]
    spools: dict[str, Path]
    out: Path
    logs: Path

    def run_dir(self) -> Path:
        [run] = [p for p in self.out.iterdir() if p.is_dir()]
        return run


def deploy(network, model_repo, root: Path, duration_s: float, stray: bool = False,
           master_timeout_s: float | None = None, ui_bind: str | None = None) -> Deployment:
    root.mkdir(parents=True)
    token = root / "token"
    token.write_text(secrets.token_urlsafe(16))
    profile = root / "hosts.toml"
    profile.write_text(profile_text(model_repo, duration_s, master_timeout_s))
    out, logs = root / "runs", root / "logs"
    master = network.start("m", "master", master_args(str(profile), bind=MASTER_IP, port=MASTER_PORT, sntp_port=SNTP_PORT,
                                                      out=str(out), wait_s=60, token_file=str(token), quiet=True,
                                                      ui_bind=ui_bind),
                           logs / "master.log")
    time.sleep(2)
    workers, spools = {}, {}
    if stray:  # a process with a wrong token, there first: refused, and the run goes on without it
        wrong = root / "wrong-token"
        wrong.write_text("not-the-token")
        workers["stray"] = network.start("stray", "stray worker", worker_args(
            master=f"{MASTER_IP}:{MASTER_PORT}", region="us", token_file=str(wrong), spool=str(root / "spool-stray")),
            logs / "stray.log")
        time.sleep(2)
    for region in ("eu", "us"):
        spools[region] = root / f"spool-{region}"
        workers[region] = network.start(region, f"worker {region}", worker_args(
            master=f"{MASTER_IP}:{MASTER_PORT}", region=region, token_file=str(token), spool=str(spools[region]),
            endpoint_urls={"mlp-http": "http://127.0.0.1:18000", "mlp-grpc": "grpc://127.0.0.1:18001"},
            master_timeout_s=master_timeout_s),
            logs / f"worker-{region}.log")
    return Deployment(master, workers, spools, out, logs)


def stop_all(d: Deployment) -> None:
    for p in [*d.workers.values(), d.master]:
        p.stop(timeout=15)


def rows_in(paths) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


def spool_chunks(spool: Path) -> list[Path]:
    return sorted(spool.glob("*/regions/*/*/requests-*.parquet"))


@pytest.fixture(scope="module")
def clean_run(network, served, model_repo, tmp_path_factory):
    d = deploy(network, model_repo, tmp_path_factory.mktemp("clean") / "d", duration_s=8, stray=True)
    try:
        code = d.master.popen.wait(timeout=180)
    finally:
        stop_all(d)
    return d, code


def test_the_master_collects_every_workers_rows_and_finishes_the_run(clean_run):
    d, code = clean_run
    run = d.run_dir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert_valid(manifest)
    assert code == 0, (d.logs / "master.log").read_text()[-3000:]  # the verdict's code: the error SLO passes
    assert (run / "report" / "index.html").is_file() and (run / "report" / "summary.json").is_file()
    layout = RunLayout(run)
    sent = {r: json.loads(layout.worker(r, f"{r}-w0").summary.read_text())["sent"] for r in ("eu", "us")}
    assert rows_in(layout.request_chunks()) == sum(sent.values()) > 0
    trace_ids = [t for p in layout.request_chunks() for t in pq.read_table(p, columns=["trace_id"]).column(0).to_pylist()]
    assert len(trace_ids) == len(set(trace_ids))
    # nothing of the run is written on the workers' side but their spools
    assert not list(d.spools["eu"].parent.glob("spool-*/*/manifest.json"))
    for region in ("eu", "us"):
        assert rows_in(spool_chunks(d.spools[region])) == sent[region]  # the spool keeps what it sent


def test_clocks_are_measured_against_the_masters_sntp(clean_run):
    d, _ = clean_run
    clock = [pq.read_table(p).to_pylist() for p in RunLayout(d.run_dir()).clock_chunks()]
    servers = {row["server"] for rows in clock for row in rows}
    assert servers == {f"{MASTER_IP}:{SNTP_PORT}"}
    assert all(abs(row["offset_ns"]) < 50_000_000 for rows in clock for row in rows)  # same host clock: ~0


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_worker_with_the_wrong_token_is_refused_and_the_run_goes_on(clean_run):
    d, _ = clean_run
    assert d.workers["stray"].popen.returncode == 2
    assert "the master refused this worker: wrong run token" in (d.logs / "stray.log").read_text()
    events = [json.loads(line) for line in (d.run_dir() / "master-events.jsonl").read_text().splitlines()]
    assert [e["reason"] for e in events if e["event"] == "worker_refused"] == [
        "wrong run token (set TAILRACE_RUN_TOKEN or --token-file to the master's)"]
    # the plan went to the admitted workers only (one whose JOIN came after the plan was announced gets it resent)
    plan_sent = next(e for e in events if e["event"] == "plan_sent")
    assert set(plan_sent["workers"]) <= {"eu-w0", "us-w0"}
    assert sorted(e["worker"] for e in events if e["event"] == "worker_admitted") == ["eu-w0", "us-w0"]


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_worker_killed_mid_run_loses_nothing_it_closed(network, served, model_repo, tmp_path):
    d = deploy(network, model_repo, tmp_path / "d", duration_s=10)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and len(spool_chunks(d.spools["us"])) < 3:
            time.sleep(0.2)
        d.workers["us"].kill()
        code = d.master.popen.wait(timeout=180)
    finally:
        stop_all(d)
    run = d.run_dir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert code == 4 and not manifest["valid"]
    assert any(r.startswith("us-w0") for r in manifest["invalid_reasons"]), manifest["invalid_reasons"]
    closed = {p.name for p in spool_chunks(d.spools["us"])}
    collected = subprocess.run([sys.executable, "-m", "tailrace.cli", "collect", str(d.spools["us"]), str(run)],
                               capture_output=True, text=True, timeout=60)
    assert collected.returncode == 0, collected.stderr
    at_master = {p.name for p in RunLayout(run).worker("us", "us-w0").dir.glob("requests-*.parquet")}
    assert closed and closed <= at_master  # nothing it closed is missing
    again = subprocess.run([sys.executable, "-m", "tailrace.cli", "collect", str(d.spools["us"]), str(run)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "0 file(s) added" in again.stdout  # idempotent


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_workers_stop_within_their_timeout_of_losing_their_master_and_keep_their_spools(network, served, model_repo,
                                                                                        tmp_path):
    """`tailrace worker --master-timeout-s 5` (a shared staging cluster where orphaned load must end fast): the
    workers stop within the timeout and a few seconds of their master's death."""
    d = deploy(network, model_repo, tmp_path / "d", duration_s=30, master_timeout_s=5)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not all(spool_chunks(s) for s in d.spools.values()):
            time.sleep(0.2)
        os.kill(d.master.pid, signal.SIGKILL)
        killed = time.monotonic()
        for region in ("eu", "us"):
            d.workers[region].popen.wait(timeout=20)
        stopped_after = time.monotonic() - killed
    finally:
        stop_all(d)
    print(f"workers stopped {stopped_after:.1f} s after their master was killed")
    assert stopped_after < 5 + 5, f"workers ran on for {stopped_after:.1f} s"
    # the killed master's helpers (its Locust master, its SNTP server) went with it
    time.sleep(1)
    marks = (f"--master-bind-host {MASTER_IP}", f"sntp --host {MASTER_IP}")
    helpers = [cmd for p in psutil.process_iter(["cmdline"])
               if (cmd := " ".join(p.info["cmdline"] or [])) and any(m in cmd for m in marks)]
    assert helpers == []
    for region in ("eu", "us"):
        assert spool_chunks(d.spools[region])  # their results are kept for `tailrace collect`


def _control_link(network, region: str, up: bool) -> None:
    """Drop (or let through again) everything between a region's host and the master's — its Locust channel and
    its clock reference — while its way to the endpoint stays up."""
    action = "-A" if up is False else "-D"
    ns = network.ns(region)
    sh("ip", "netns", "exec", ns, "iptables", action, "OUTPUT", "-d", MASTER_IP, "-j", "DROP")
    sh("ip", "netns", "exec", ns, "iptables", action, "INPUT", "-s", MASTER_IP, "-j", "DROP")


def _wait_for_chunks(d: Deployment, count: int = 2) -> None:
    deadline = time.time() + 60
    while time.time() < deadline and not all(len(spool_chunks(s)) >= count for s in d.spools.values()):
        time.sleep(0.2)


def _page_status(network, url: str) -> int:
    """An HTTP GET of the master's live page from the master's own host: its status code."""
    probe = subprocess.run(["ip", "netns", "exec", network.ns("m"), sys.executable, "-c",
                            f"import httpx; print(httpx.get({url!r}, timeout=5).status_code)"],
                           capture_output=True, text=True, timeout=60)
    return int(probe.stdout.strip() or 0)


def test_a_regions_link_to_the_master_down_8_s_loses_nothing(network, served, model_repo, tmp_path):
    """us's link to the master is cut for 8 s mid-run (generator.master_timeout_s 30 s): its worker keeps its
    schedule and its spool, re-sends what was not acknowledged when the link returns, the master marks nobody lost;
    the run is VALID with every row at the master, and the gap is named — also on the master's live page (bound to
    the master's non-loopback address: refused without the run's token), watched in headless Chromium on the
    master's host."""
    d = deploy(network, model_repo, tmp_path / "d", duration_s=16, ui_bind=f"{MASTER_IP}:{UI_PORT}")
    url, token = f"http://{MASTER_IP}:{UI_PORT}/", (tmp_path / "d" / "token").read_text()
    browser = tmp_path / "chromium-on-m"  # Playwright starts the browser on the master's host
    browser.write_text(f'#!/bin/sh\nexec ip netns exec {network.ns("m")} {chromium()} "$@"\n')
    browser.chmod(0o755)
    try:
        with browser_page(str(browser)) as page:
            _wait_for_chunks(d)
            assert _page_status(network, url) == 401 and _page_status(network, url + "?token=wrong") == 401
            page.goto(f"{url}?token={token}")
            page.wait_for_function("window.tailraceLive.latest && window.tailraceLive.latest.workers.length === 2")
            _control_link(network, "us", up=False)
            try:
                time.sleep(8)
            finally:
                _control_link(network, "us", up=True)
            page.wait_for_function("(window.tailraceLive.latest.workers.find(w => w.worker === 'us-w0') || {gaps: []})"
                                   ".gaps.some(g => g[1] !== null)", timeout=30_000)
            assert page.errors == [], page.errors
            gaps = page.inner_text("tr[data-worker='us-w0'] .gaps")
            assert gaps.startswith("gap ") and page.inner_text("tr[data-worker='eu-w0'] .gaps") == "none", gaps
            ages = page.evaluate("window.tailraceLive.chartData('heartbeat')")  # [seconds, eu-w0, us-w0]
            assert max(a for a in ages[2] if a is not None) >= 6 and max(a for a in ages[1] if a is not None) < 3
            assert page.errors == [], page.errors
        code = d.master.popen.wait(timeout=240)
    finally:
        stop_all(d)
    run = d.run_dir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["valid"], (manifest["invalid_reasons"], (d.logs / "master.log").read_text()[-2000:])
    assert code == 0
    layout = RunLayout(run)
    sent = {r: json.loads(layout.worker(r, f"{r}-w0").summary.read_text()) for r in ("eu", "us")}
    assert all(s["sent"] == s["planned"] for s in sent.values())
    assert rows_in(layout.request_chunks()) == sum(s["sent"] for s in sent.values())
    gap = [w for w in manifest["warnings"] if w.startswith("us-w0: no contact with the master for")]
    assert gap and not any(w.startswith("eu-w0: no contact") for w in manifest["warnings"]), manifest["warnings"]
    events = [json.loads(line) for line in (run / "master-events.jsonl").read_text().splitlines()]
    assert [e["worker"] for e in events if e["event"] == "worker_silent"] == ["us-w0"]
    assert [e["worker"] for e in events if e["event"] == "worker_returned"] == ["us-w0"]
    assert not [e for e in events if e["event"] == "worker_left" and e["reason"] == "heartbeat missing"]


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_link_down_past_the_timeout_is_invalid_naming_the_worker_and_collect_brings_its_rows(
        network, served, model_repo, tmp_path):
    """The same cut, past a 5 s generator.master_timeout_s: us-w0 stops and keeps its spool, the master marks it
    lost — INVALID naming it — and `tailrace collect` of its spool brings back every chunk it closed."""
    d = deploy(network, model_repo, tmp_path / "d", duration_s=20, master_timeout_s=5)
    try:
        _wait_for_chunks(d)
        _control_link(network, "us", up=False)
        try:
            d.workers["us"].popen.wait(timeout=30)
        finally:
            _control_link(network, "us", up=True)
        code = d.master.popen.wait(timeout=240)
    finally:
        stop_all(d)
    assert d.workers["us"].popen.returncode == WORKER_MASTER_LOST  # its own code: not a verdict
    run = d.run_dir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert code == 4 and not manifest["valid"]
    assert any("us-w0" in r for r in manifest["invalid_reasons"]), manifest["invalid_reasons"]
    closed = {p.name for p in spool_chunks(d.spools["us"])}
    collected = subprocess.run([sys.executable, "-m", "tailrace.cli", "collect", str(d.spools["us"]), str(run)],
                               capture_output=True, text=True, timeout=60)
    assert collected.returncode == 0, collected.stderr
    at_master = {p.name for p in RunLayout(run).worker("us", "us-w0").dir.glob("requests-*.parquet")}
    assert closed and closed <= at_master
