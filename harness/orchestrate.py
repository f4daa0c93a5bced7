"""`tailrace run`: local orchestration of one run, and the master / worker entry points.

Starts (as needed) the SNTP reference, the embedded endpoint, one delay proxy per emulated region
(each on its own 127.x address), a Locust master and one Locust worker per region worker; shows live
progress; stops everything by PID at the end or on Ctrl-C; writes the manifest.
"""
from __future__ import annotations

import json
import secrets
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

from harness.manifest import git_sha, host_info, read_master_events, versions, worker_timeline, write_manifest
from harness.host_cpu import CpuTimes, cpu_usage, read_cpu_times, steal_warning
from harness.processes import ManagedProcess, check_placement, free_port, start_process, tailrace_argv
from harness.profile import EMBEDDED, Profile
from harness.server_stats import ServerStatsRecorder, StatsTarget
from harness.servers import Servers, start_servers
from harness.triton_server import TritonServer

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
LEAD_S = 6.0  # plan → start instant: time for workers to load data, pre-encode requests, sample clocks


def describe_load(profile: Profile) -> str:
    """One line: the scenario and its knobs."""
    load = profile.load
    if load.scenario == "server":
        return f"Poisson {load.rate:g} req/s" + (f" with {len(load.phases)} phase change(s)" if load.phases else "")
    if load.scenario == "single-stream":
        return "single-stream (one request at a time per region)"
    if load.scenario == "multi-stream":
        return f"multi-stream ({load.samples_per_query} samples every {load.interval_ms:g} ms per region)"
    return f"offline (batches of {load.offline_batch}, {load.offline_concurrency} in flight per worker)"


def region_address(index: int) -> str:
    """The loopback address of emulated region `index` (127.1.<i+1>.1)."""
    return f"127.1.{index + 1}.1"


def locust_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args]


def new_run_id(profile: Profile) -> str:
    return f"{profile.name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(2)}"


def run_seconds(profile: Profile) -> float:
    """How long the master runs: lead + warm-up + duration + drain."""
    drain = max(e.timeout_ms for e in profile.endpoints) / 1000 + 3
    return LEAD_S + profile.load.warmup_s + profile.load.duration_s + drain + 2


def master_config(run_id: str, run_dir: Path, ntp_servers: list[str], models_dir: Path,
                  resolved_profile: dict) -> dict:
    return {"run_id": run_id, "profile": resolved_profile, "run_dir": str(run_dir.resolve()),
            "ntp_servers": ntp_servers, "models_dir": str(models_dir.resolve()), "lead_s": LEAD_S}


def worker_env(region: str, index: int, skew_ms: float, endpoint_urls: dict[str, str], metrics_port: int | None,
               out_dir: str | None = None, models_dir: str | None = None) -> dict[str, str]:
    env = {"TAILRACE_REGION": region, "TAILRACE_WORKER_INDEX": str(index), "TAILRACE_CLOCK_SKEW_MS": str(skew_ms),
           "TAILRACE_ENDPOINT_URLS": json.dumps(endpoint_urls)}
    if metrics_port:
        env["TAILRACE_METRICS_PORT"] = str(metrics_port)
    if out_dir:
        env["TAILRACE_OUT_DIR"] = out_dir
    if models_dir:
        env["TAILRACE_MODELS_DIR"] = models_dir
    return env


@dataclass
class LocalRun:
    """The processes of one local run, stopped in reverse order."""

    profile: Profile
    out: Path
    run_id: str = ""
    run_dir: Path = Path()
    processes: list[ManagedProcess] = field(default_factory=list)
    workers: dict[str, ManagedProcess] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    endpoint_admin: dict[str, str] = field(default_factory=dict)  # endpoint name → http base for stats
    stats_targets: list[StatsTarget] = field(default_factory=list)
    stats: ServerStatsRecorder | None = None
    servers: Servers | None = None  # given: shared across runs (capacity trials), not stopped here
    started_ns: int = 0
    cpu_at_start: CpuTimes | None = None
    quiet: bool = False

    def log(self, msg: str) -> None:
        if not self.quiet:
            print(msg, flush=True)

    def start(self) -> None:
        p = self.profile
        check_placement(p)
        self.run_id = new_run_id(p)
        self.run_dir = self.out / self.run_id
        self.run_dir.mkdir(parents=True, exist_ok=False)
        logs = self.run_dir / "logs"
        models_dir = Path(p.embedded.models_dir)
        if p.uses_embedded and not (models_dir / "_data").exists():
            from endpoints.model_build import build_repository

            self.log(f"building models into {models_dir}")
            build_repository(models_dir, p.embedded.mm1_mean_ms or 2.0)

        ntp_servers = list(p.clock.servers)
        if EMBEDDED in ntp_servers:
            port = free_port()
            proc = start_process("sntp", tailrace_argv("sntp", "--port", str(port)), logs / "sntp.log")
            self.processes.append(proc)
            ntp_servers = [f"127.0.0.1:{port}" if s == EMBEDDED else s for s in ntp_servers]

        resolved = p.model_dump(mode="json")
        if self.servers is None and (p.uses_embedded or p.uses_triton):
            self.servers = start_servers(p, logs, self.log)
            self.processes.extend(s.process for s in self.servers.instances)
        if self.servers is not None:
            self.servers.resolve(resolved)
            self._write_cold_starts(resolved)
        self.plan_server_stats(resolved)
        self.save_model_metadata()
        self.stats.snapshot("before")

        urls_by_region = self._start_proxies(resolved, logs)
        cfg = master_config(self.run_id, self.run_dir, ntp_servers, models_dir, resolved)
        (self.run_dir / "master-config.json").write_text(json.dumps(cfg, indent=2))
        self.started_ns = time.time_ns()
        self.cpu_at_start = read_cpu_times()
        n_workers = sum(r.workers for r in p.regions)
        master_port = free_port()
        master = start_process("locust master", locust_argv(
            "--master", "--headless", "-u", str(n_workers), "-r", str(n_workers), "--expect-workers",
            str(n_workers), "--expect-workers-max-wait", "60", "-t", f"{run_seconds(p):.0f}s",
            "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port), "--only-summary",
            "--exit-code-on-error", "0", "--stop-timeout", "5", "--loglevel", "WARNING"),
            logs / "master.log", env={"TAILRACE_MASTER_CONFIG": str(self.run_dir / "master-config.json")},
            cpus=p.generator.cpus)
        self.processes.append(master)
        self.master = master
        for r in p.regions:
            for i in range(r.workers):
                name = f"{r.name}-w{i}"
                mport = free_port()
                self.metrics_ports[name] = mport
                env = worker_env(r.name, i, r.clock_skew_ms, urls_by_region.get(r.name, {}), mport)
                proc = start_process(f"worker {name}", locust_argv(
                    "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port),
                    "--loglevel", "WARNING"), logs / f"worker-{name}.log", env=env, cpus=p.generator.cpus)
                self.processes.append(proc)
                self.workers[name] = proc
        self.log(f"run {self.run_id}: {n_workers} worker(s) in {len(p.regions)} region(s), "
                 f"{describe_load(p)} for {p.load.duration_s:g} s (+{p.load.warmup_s:g} s warm-up) → {self.run_dir}")

    def _start_proxies(self, resolved: dict, logs: Path) -> dict[str, dict[str, str]]:
        urls_by_region: dict[str, dict[str, str]] = {}
        for i, region in enumerate(self.profile.regions):
            if (region.delay_ms <= 0 and region.jitter_ms <= 0) or not self.profile.network_endpoints:
                continue
            addr = region_address(i)
            routes, urls = [], {}
            targets: dict[str, int] = {}
            for ep in resolved["endpoints"]:
                if ep["protocol"] == "inprocess":
                    continue
                u = urlparse(ep["url"])
                target = f"{u.hostname}:{u.port}"
                if target not in targets:
                    targets[target] = free_port(addr)
                    routes.append(f"{addr}:{targets[target]}={target}")
                urls[ep["name"]] = f"{u.scheme}://{addr}:{targets[target]}"
            proc = start_process(f"proxy {region.name}", tailrace_argv(
                "proxy", *[a for r in routes for a in ("--route", r)], "--delay-ms", str(region.delay_ms),
                "--jitter-ms", str(region.jitter_ms), "--seed", str(self.profile.load.seed + i)),
                logs / f"proxy-{region.name}.log", cpus=self.profile.generator.cpus)
            self.processes.append(proc)
            urls_by_region[region.name] = urls
        deadline = time.monotonic() + 10
        for region, urls in urls_by_region.items():  # wait until each proxy accepts connections
            for url in urls.values():
                u = urlparse(url)
                while time.monotonic() < deadline:
                    try:
                        import socket

                        with socket.create_connection((u.hostname, u.port), timeout=0.5):
                            break
                    except OSError:
                        time.sleep(0.05)
        return urls_by_region

    @property
    def triton(self) -> TritonServer | None:
        """The local Triton of this run, if it has one."""
        if self.servers is None:
            return None
        return next((s.triton for s in self.servers.instances if s.triton is not None), None)

    def _write_cold_starts(self, resolved: dict) -> None:
        """endpoints/<name>/cold-start.json for endpoints whose server this run started (and timed)."""
        for ep in resolved["endpoints"]:
            for server in self.servers.instances:
                if ep.get("server_kind") == server.kind and server.serves(ep["model"]) and server.cold_start:
                    d = self.run_dir / "endpoints" / ep["name"]
                    d.mkdir(parents=True, exist_ok=True)
                    (d / "cold-start.json").write_text(json.dumps(server.cold_start))

    def save_model_metadata(self) -> None:
        """endpoints/<name>/model.json: the model's build metadata (size, parameters, accuracy, sha256)."""
        for ep in self.profile.endpoints:
            root = Path(self.profile.triton.models_dir if ep.url == "triton" else self.profile.embedded.models_dir)
            meta = root / ep.model / "metadata.json"
            if meta.exists():
                d = self.run_dir / "endpoints" / ep.name
                d.mkdir(parents=True, exist_ok=True)
                (d / "model.json").write_text(meta.read_text())

    def plan_server_stats(self, resolved: dict) -> None:
        """Which endpoints have statistics / metrics to snapshot (resolved URLs, not through the proxies)."""
        for ep in resolved["endpoints"]:
            stats_base = ep.get("stats_url") or (ep["url"] if ep["protocol"] == "kserve-http" else None)
            kind = ep.pop("server_kind", "inprocess" if ep["protocol"] == "inprocess" else "remote")
            spec = next(e for e in self.profile.endpoints if e.name == ep["name"])
            auth = (spec.auth_header, spec.auth_env) if spec.auth_header and spec.auth_env else None
            self.stats_targets.append(StatsTarget(ep["name"], ep["model"], kind, stats_base, ep.get("metrics_url"),
                                                  auth))
            if stats_base:
                self.endpoint_admin[ep["name"]] = stats_base
        self.stats = ServerStatsRecorder(self.run_dir, self.stats_targets, self.profile.server_stats.interval_s)

    def wait(self, progress) -> int:
        """Wait for the master to finish, showing progress; returns the master's exit code."""
        deadline = time.monotonic() + run_seconds(self.profile) + 90
        while self.master.alive() and time.monotonic() < deadline:
            progress(self)
            if self.stats is not None and self.stats.due():
                self.stats.periodic()
            time.sleep(1.0)
        if self.master.alive():
            self.log("master did not finish in time; stopping it")
            self.master.stop()
        return self.master.popen.returncode

    def stop(self) -> None:
        """Stop every process we started, newest first, by PID (Triton with its children and shm segments)."""
        if self.stats is not None:
            self.stats.snapshot("after")
            self.stats.close()
        owned = {id(s.process): s for s in self.servers.instances} if self.servers is not None else {}
        for proc in reversed(self.processes):
            if id(proc) in owned and owned[id(proc)].triton is not None:
                owned[id(proc)].triton.stop()  # with its children and shared memory
            else:
                proc.stop(timeout=10)

    def manifest(self, interrupted: bool) -> dict:
        p = self.profile
        expected = [f"{r.name}-w{i}" for r in p.regions for i in range(r.workers)]
        events = read_master_events(self.run_dir)
        timeline = worker_timeline(events, expected)
        summaries, invalid, warnings = {}, [], []
        for name in expected:
            region = name.rsplit("-w", 1)[0]
            path = self.run_dir / "regions" / region / name / "worker.json"
            if path.exists():
                summaries[name] = json.loads(path.read_text())
                invalid += summaries[name].get("invalid_reasons", [])
                warnings += summaries[name].get("warnings", [])
            else:
                code = self.workers[name].popen.returncode if name in self.workers else None
                invalid.append(f"{name}: no worker summary (worker exited with {code}); its closed chunks are used")
        if interrupted:
            invalid.append("run interrupted (Ctrl-C) before the schedule finished")
        cpu_now = read_cpu_times()
        host_cpu = cpu_usage(self.cpu_at_start, cpu_now) if self.cpu_at_start and cpu_now else {}
        steal = steal_warning(host_cpu)
        if steal:
            warnings.append(steal)
        plan = next((e for e in events if e["event"] == "plan_sent"), {})
        return {
            "run_id": self.run_id, "profile_name": p.name, "profile": p.model_dump(mode="json"),
            "seed": p.load.seed, "versions": versions(), "host": host_info(), "git_sha": git_sha(),
            "start_ns": self.started_ns, "end_ns": time.time_ns(), "start_ref_ns": plan.get("start_ref_ns"),
            "servers": [{k: v for k, v in vars(t).items() if k != "auth"} for t in self.stats_targets],
            "regions": [r.model_dump(mode="json") | {"address": region_address(i) if r.delay_ms or r.jitter_ms
                        else None} for i, r in enumerate(p.regions)],
            "workers": {n: {**timeline.get(n, {}), "summary": summaries.get(n)} for n in expected},
            "host_cpu": host_cpu,
            "valid": not invalid, "invalid_reasons": invalid, "warnings": warnings, "interrupted": interrupted,
        }


def run_local(profile: Profile, out: Path, quiet: bool = False) -> tuple[Path, dict]:
    """Run a profile locally end to end; returns (run_dir, manifest)."""
    from harness.progress import Progress

    run = LocalRun(profile, out, quiet=quiet)
    interrupted = False
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    progress = Progress(quiet)
    try:
        run.start()
        run.wait(progress.update)
    except KeyboardInterrupt:
        interrupted = True
        run.log("interrupted: stopping every process of this run")
    finally:
        progress.close()
        run.stop()
        signal.signal(signal.SIGTERM, previous)
    if not run.run_id:
        raise RuntimeError("run did not start")
    manifest = run.manifest(interrupted)
    write_manifest(run.run_dir, manifest)
    return run.run_dir, manifest
