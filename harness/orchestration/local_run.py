"""`tailrace run`: one run on this machine.

Starts (as needed) the SNTP reference, the servers the profile asks for, one delay proxy per emulated region,
resolves the run plan once (contract/plan.py) and writes it, then starts a Locust master and one Locust worker
per region worker; shows live progress; stops everything by PID at the end or on Ctrl-C; writes the manifest.
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

from contract.layout import RunLayout, write_atomic
from contract.plan import RunPlan, endpoint_kind
from contract.profile import EMBEDDED, MASTER_CLOCK, Profile
from harness.orchestration.disk_space import MIN_FREE_BYTES, LowDiskError, low_disk_reason, min_free_bytes, stop_reason
from harness.orchestration.endpoint_check import resolve_requests
from harness.orchestration.preflight import check_local
from harness.orchestration.run_record import RunRecord, save_model_metadata, started_manifest, write_manifest
from harness.orchestration.server_stats import ServerStatsRecorder, stats_targets
from harness.services.processes import ManagedProcess, free_port, start_process, tailrace_argv
from harness.services.region_proxies import proxied_regions, start_region_proxies
from harness.services.servers import Servers, start_servers
from harness.services.triton_server import TritonServer
from harness.worker.identity import PLAN_ENV, TOKEN_ENV, WorkerIdentity

LOCUSTFILE = Path(__file__).resolve().parents[1] / "worker" / "locustfile.py"
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


def locust_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args]


def master_argv(plan: RunPlan, bind: str, port: int, max_wait_s: int, *extra: str) -> list[str]:
    """The Locust master of `plan`: one user per expected worker, for the plan's run time."""
    n = sum(r.workers for r in plan.profile.regions)
    return locust_argv("--master", "-u", str(n), "-r", str(n), "--expect-workers", str(n),
                       "--expect-workers-max-wait", str(max_wait_s), "-t", f"{plan.run_seconds:.0f}s",
                       "--master-bind-host", bind, "--master-bind-port", str(port), "--only-summary",
                       "--exit-code-on-error", "0", *extra)


def new_run_id(profile: Profile) -> str:
    return f"{profile.name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(2)}"


def log_effective_settings(plan: RunPlan, layout: RunLayout) -> None:
    """logs/settings.log: the plan's effective settings, one per line."""
    write_atomic(layout.log("settings"), "\n".join(plan.effective_settings()) + "\n")


@dataclass
class LocalRun:
    """The processes of one local run, stopped in reverse order."""

    profile: Profile
    out: Path
    servers: Servers | None = None  # given: shared across runs (capacity trials), not stopped here
    quiet: bool = False
    run_id: str = ""
    layout: RunLayout | None = None
    plan: RunPlan | None = None
    record: RunRecord | None = None
    stats: ServerStatsRecorder | None = None
    processes: list[ManagedProcess] = field(default_factory=list)
    workers: dict[str, ManagedProcess] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    master_lost_s: float | None = None
    write_errors: list[str] = field(default_factory=list)  # the run directory could not be written (a full disk)
    reserve: int = MIN_FREE_BYTES  # free space kept on the run directory's disk (harness/orchestration/disk_space.py)

    @property
    def run_dir(self) -> Path:
        return self.layout.root

    def log(self, msg: str) -> None:
        if not self.quiet:
            print(msg, flush=True)

    def start(self) -> None:
        p = self.profile
        check_local(p, self.out)
        self.run_id = new_run_id(p)
        self.layout = RunLayout(self.out / self.run_id)
        self.layout.root.mkdir(parents=True, exist_ok=False)
        write_manifest(self.layout, started_manifest(p, self.run_id))  # replaced when the run ends
        self.reserve = min_free_bytes()
        low = low_disk_reason(self.layout.root, self.reserve)
        if low is not None:
            raise LowDiskError(f"{low}; no load was sent — free some space or choose another --out")
        self._build_models_if_missing()
        ntp_servers = self._start_sntp_if_asked()
        if self.servers is None and (p.uses_embedded or p.uses_triton):
            self.servers = start_servers(p, self.layout.logs, self.log)
            self.processes.extend(s.process for s in self.servers.instances)
        resolved = self.servers.resolve(p) if self.servers is not None else p
        plan = RunPlan(run_id=self.run_id, run_dir=str(self.layout.root.resolve()), profile=resolved,
                       endpoint_kinds={e.name: endpoint_kind(e) for e in p.endpoints}, ntp_servers=ntp_servers,
                       models_dir=str(Path(p.embedded.models_dir).resolve()), lead_s=LEAD_S,
                       data_root=str(Path.cwd()))
        requests, _ = resolve_requests(plan)  # no load before every endpoint takes the requests and its data fits
        proxies, region_urls = start_region_proxies(resolved, self.layout)
        self.processes.extend(proxies)
        self.plan = plan.model_copy(update={"requests": requests, "region_urls": region_urls})
        self.plan.write(self.layout)
        log_effective_settings(self.plan, self.layout)
        self._write_cold_starts()
        save_model_metadata(self.plan, self.layout)
        targets = stats_targets(self.plan)
        self.stats = ServerStatsRecorder(self.layout, targets, p.server_stats.interval_s)
        self.stats.snapshot("before")
        self.record = RunRecord(self.plan, self.layout, servers=[
            t.describe() for t in targets],
            region_addresses=proxied_regions(resolved))
        self._start_locust()

    def _build_models_if_missing(self) -> None:
        """`tailrace models build` into the embedded models_dir when the profile needs it and it is empty."""
        models_dir = Path(self.profile.embedded.models_dir)
        if self.profile.uses_embedded and not (models_dir / "_data").exists():
            self.log(f"building models into {models_dir}")
            build = start_process("models build", tailrace_argv(
                "models", "build", "--out", str(models_dir), "--mm1-mean-ms",
                str(self.profile.embedded.mm1_mean_ms or 2.0)), self.layout.log("models-build"))
            if build.popen.wait() != 0:
                raise RuntimeError(f"building models into {models_dir} failed:\n{build.log_tail()}")

    def _start_sntp_if_asked(self) -> list[str]:
        """The profile's clock references, with 'embedded' replaced by an SNTP server this run starts."""
        servers = list(self.profile.clock.servers)
        if EMBEDDED not in servers and MASTER_CLOCK not in servers:
            return servers
        port = free_port()  # on one machine, the master's reference and the embedded one are the same thing
        self.processes.append(start_process("sntp", tailrace_argv("sntp", "--port", str(port)),
                                            self.layout.log("sntp")))
        return [f"127.0.0.1:{port}" if s in (EMBEDDED, MASTER_CLOCK) else s for s in servers]

    def _start_locust(self) -> None:
        p, layout = self.profile, self.layout
        n_workers = sum(r.workers for r in p.regions)
        master_port = free_port()
        token = secrets.token_urlsafe(16)  # this run's: only its own workers are admitted
        self.master = start_process("locust master", master_argv(
            self.plan, "127.0.0.1", master_port, 60, "--headless", "--stop-timeout", "5", "--loglevel", "WARNING"),
            layout.log("master"), env={PLAN_ENV: str(layout.plan), TOKEN_ENV: token}, cpus=p.generator.cpus)
        self.processes.append(self.master)
        for r in p.regions:
            for i in range(r.workers):
                identity = WorkerIdentity(r.name, i, r.clock_skew_ms, metrics_port=free_port())
                self.metrics_ports[identity.name] = identity.metrics_port
                proc = start_process(f"worker {identity.name}", locust_argv(
                    "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port),
                    "--loglevel", "WARNING"), layout.log(f"worker-{identity.name}"),
                    env={**identity.env(), TOKEN_ENV: token}, cpus=p.generator.cpus)
                self.processes.append(proc)
                self.workers[identity.name] = proc
        self.log(f"run {self.run_id}: {n_workers} worker(s) in {len(p.regions)} region(s), "
                 f"{describe_load(p)} for {p.load.duration_s:g} s (+{p.load.warmup_s:g} s warm-up) → {layout.root}")

    @property
    def triton(self) -> TritonServer | None:
        """The local Triton of this run, if it has one."""
        if self.servers is None:
            return None
        return next((s.triton for s in self.servers.instances if s.triton is not None), None)

    def _write_cold_starts(self) -> None:
        """endpoints/<name>/cold-start.json for endpoints whose server this run started (and timed)."""
        if self.servers is None:
            return
        for ep in self.profile.endpoints:
            server = self.servers.serving(self.plan.endpoint_kinds[ep.name], ep.model)
            if server is not None and server.cold_start:
                write_atomic(self.layout.cold_start(ep.name), json.dumps(server.cold_start))

    def wait(self, progress) -> int:
        """Wait for the master to finish, showing progress; returns the master's exit code. A master that
        exits with an error before the run's end is recorded (the run is then INVALID)."""
        started = time.monotonic()
        deadline = started + self.plan.run_seconds + 90
        while self.master.alive() and time.monotonic() < deadline:
            progress(self)
            low = stop_reason(self.stats, self.layout.root, self.reserve)
            if low is not None:  # stopped while the manifest and the report still fit
                self.write_errors.append(low)
                print(f"tailrace run: {low}: stopping the run", file=sys.stderr, flush=True)
                break
            time.sleep(0.5)
        if self.master.alive():
            if not self.write_errors:
                self.log("master did not finish in time; stopping it")
            self.master.stop()
        code = self.master.popen.returncode
        if code != 0 and not self.write_errors:  # stopped by us for a full disk: that reason is recorded instead
            self.master_lost_s = (time.time_ns() - self.record.started_ns) / 1e9
            self.log(f"the Locust master exited with {code} after {self.master_lost_s:.0f} s: stopping the run")
        return code

    def stop(self) -> None:
        """Stop every process we started, newest first, by PID (Triton with its children and shm segments) —
        whatever else fails: a last statistics snapshot that cannot be written (a full disk) is reported, and
        the processes are stopped all the same."""
        try:
            if self.stats is not None:
                self.stats.snapshot("after")
                self.stats.close()
        except OSError as exc:
            self.write_errors.append(str(exc))
            print(f"tailrace run: the last server statistics were not saved: {exc}", file=sys.stderr, flush=True)
        finally:
            owned = {id(s.process): s for s in self.servers.instances} if self.servers is not None else {}
            for proc in reversed(self.processes):
                if id(proc) in owned and owned[id(proc)].triton is not None:
                    owned[id(proc)].triton.stop()  # with its children and shared memory
                else:
                    proc.stop(timeout=10)

    def manifest(self, interrupted: bool) -> dict:
        codes = {name: proc.popen.returncode for name, proc in self.workers.items()}
        return self.record.manifest(interrupted, codes, self.master_lost_s,
                                    self.master.popen.returncode if self.master_lost_s is not None else None,
                                    write_errors=self.write_errors)


def run_local(profile: Profile, out: Path, quiet: bool = False) -> tuple[Path, dict]:
    """Run a profile locally end to end; returns (run_dir, manifest)."""
    from harness.orchestration.progress import Progress

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
    if run.record is None:
        raise RuntimeError("run did not start")
    manifest = run.manifest(interrupted)
    try:
        write_manifest(run.layout, manifest)
    except OSError as exc:  # the manifest written at the start stays: it marks the run as not ended (INVALID)
        print(f"tailrace run: the final manifest was not written ({exc}); {run.layout.manifest} still says the run "
              "did not end", file=sys.stderr, flush=True)
    return run.run_dir, manifest
