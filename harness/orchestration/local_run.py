"""`tailrace run`: one run on this machine.

Starts (as needed) the SNTP reference, the servers the profile asks for, one delay proxy per emulated region,
resolves the run plan once (contract/plan.py), then goes through the run's lifecycle
(harness/orchestration/lifecycle.py) with its workers started here (`LocalWorkers`): the Locust master and
one Locust worker per region worker; shows live progress; stops everything by PID at the end or on Ctrl-C.
"""
from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from tailrace.contract.internal_processes import MODELS_BUILD, SNTP_SERVER, ModelsBuildOptions, SntpOptions, internal_argv
from tailrace.contract.layout import RunLayout
from tailrace.contract.master_events import WORKER_HELLO
from tailrace.contract.plan import RunPlan, endpoint_kind
from tailrace.contract.profile import EMBEDDED, MASTER_CLOCK, Profile
from tailrace.contract.rates import describe_arrivals
from tailrace.harness.orchestration.answer_keys import answer_models
from tailrace.harness.orchestration.disk_space import MIN_FREE_BYTES, min_free_bytes
from tailrace.harness.orchestration.endpoint_check import resolve_requests
from tailrace.harness.orchestration.lifecycle import (
    LEAD_S,
    RunLifecycle,
    create_run_directory,
    locust_argv,
    new_run_id,
    write_cold_starts,
)
from tailrace.harness.orchestration.live_page import LivePage
from tailrace.harness.orchestration.preflight import check_local, needs_models_build
from tailrace.harness.orchestration.server_stats import stats_targets
from tailrace.harness.services.processes import ManagedProcess, free_port, sigterm_as_interrupt, start_process, stop_each
from tailrace.harness.services.region_proxies import proxied_regions, start_region_proxies
from tailrace.harness.services.servers import Servers, start_servers
from tailrace.harness.services.triton_server import TritonServer
from tailrace.harness.worker.identity import TOKEN_ENV, WorkerIdentity

__all__ = ["LEAD_S", "LocalRun", "LocalWorkers", "run_local"]


def describe_load(profile: Profile) -> str:
    """One line: the scenario and its knobs."""
    load = profile.load
    if load.scenario == "server":
        return describe_arrivals(load)
    if load.scenario == "single-stream":
        return "single-stream (one request at a time per region)"
    if load.scenario == "multi-stream":
        return f"multi-stream ({load.samples_per_query} samples every {load.interval_ms:g} ms per region)"
    return f"offline (batches of {load.offline_batch}, {load.offline_concurrency} in flight per worker)"


@dataclass
class LocalWorkers:
    """The run's workers, started here: one Locust worker process per region worker, each with its identity."""

    plan: RunPlan
    layout: RunLayout
    cpus: list[int] | None = None
    max_wait_s: int = 60
    stop_timeout_s: int = 5
    processes: dict[str, ManagedProcess] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)

    def start(self, master_port: int, token: str) -> None:
        for r in self.plan.profile.regions:
            for i in range(r.workers):
                identity = WorkerIdentity(r.name, i, r.clock_skew_ms, metrics_port=0)  # its own: in its HELLO
                self.processes[identity.name] = start_process(f"worker {identity.name}", locust_argv(
                    "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port),
                    "--loglevel", "WARNING"), self.layout.log(f"worker-{identity.name}"),
                    env={**identity.env(), TOKEN_ENV: token}, cpus=self.cpus)

    def follow(self, events: list[dict]) -> None:
        """Where each worker serves its metrics (its HELLO), for the progress table: each binds a free port of its
        own as it starts (one chosen here could be taken by another process before the worker bound it, and the
        worker could not run)."""
        for hello in WORKER_HELLO.among(events):
            if hello.get("metrics_port") and hello.get("worker") in self.processes:
                self.metrics_ports[hello["worker"]] = hello["metrics_port"]

    def exit_codes(self) -> dict[str, int | None]:
        return {name: proc.popen.returncode for name, proc in self.processes.items()}


@dataclass
class LocalRun:
    """The processes of one local run (stopped in reverse order) and its lifecycle."""

    profile: Profile
    out: Path
    servers: Servers | None = None  # given: shared across runs (capacity trials), not stopped here
    quiet: bool = False
    run_id: str = ""
    layout: RunLayout | None = None
    plan: RunPlan | None = None
    lifecycle: RunLifecycle | None = None
    processes: list[ManagedProcess] = field(default_factory=list)
    local_workers: LocalWorkers | None = None
    reserve: int = MIN_FREE_BYTES  # free space kept on the run directory's disk (harness/orchestration/disk_space.py)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(16))  # only this run's workers are admitted
    live: LivePage | None = None
    before_load: Callable[[], object] | None = None  # called once the endpoints are up, before the generators start

    @property
    def run_dir(self) -> Path:
        return self.layout.root

    @property
    def master(self) -> ManagedProcess | None:
        return self.lifecycle.master if self.lifecycle is not None else None

    @property
    def workers(self) -> dict[str, ManagedProcess]:
        return self.local_workers.processes if self.local_workers is not None else {}

    @property
    def metrics_ports(self) -> dict[str, int]:
        return self.local_workers.metrics_ports if self.local_workers is not None else {}

    def log(self, msg: str) -> None:
        if not self.quiet:
            print(msg, flush=True)

    def start(self) -> None:
        p = self.profile
        check_local(p, self.out)
        self.run_id = new_run_id(p)
        self.layout = RunLayout(self.out / self.run_id)
        self.reserve = min_free_bytes()
        create_run_directory(self.layout, p, self.run_id, self.reserve)
        self._build_models_if_missing()
        ntp_servers = self._start_sntp_if_asked()
        if self.servers is None and (p.uses_embedded or p.uses_triton):
            self.servers = start_servers(p, self.layout.logs, self.log, answer_models(p, self.layout.logs, Path.cwd()))
            self.processes.extend(s.process for s in self.servers.instances)
        resolved = self.servers.resolve(p) if self.servers is not None else p
        plan = RunPlan(run_id=self.run_id, run_dir=str(self.layout.root.resolve()), profile=resolved,
                       endpoint_kinds={e.name: endpoint_kind(e) for e in p.endpoints}, ntp_servers=ntp_servers,
                       models_dir=str(Path(p.embedded.models_dir).resolve()), lead_s=LEAD_S,
                       data_root=str(Path.cwd()))
        checked = resolve_requests(plan)  # no load before every endpoint takes the requests and its data fits
        proxies, region_urls = start_region_proxies(resolved, self.layout)
        self.processes.extend(proxies)
        self.plan = plan.model_copy(update={"requests": checked.requests, "model_inputs": checked.model_inputs,
                                            "region_urls": region_urls})
        self.lifecycle = RunLifecycle(self.plan, self.layout, self.reserve, "tailrace run", self.quiet, live=self.live)
        self.lifecycle.open(stats_targets(self.plan), proxied_regions(resolved))
        write_cold_starts(self.layout, self._cold_starts())
        if self.before_load is not None:
            self.before_load()
        self.local_workers = LocalWorkers(self.plan, self.layout, p.generator.cpus)
        try:
            self.lifecycle.start(self.local_workers, "127.0.0.1", free_port(), self.token, p.generator.cpus)
        finally:  # a stop that lands while they start (SIGTERM: KeyboardInterrupt) stops what had started too
            self.processes += [proc for proc in (self.lifecycle.master, *self.local_workers.processes.values())
                               if proc is not None]
        self.log(f"run {self.run_id}: {len(self.workers)} worker(s) in {len(p.regions)} region(s), "
                 f"{describe_load(p)} for {p.load.duration_s:g} s (+{p.load.warmup_s:g} s warm-up) → {self.layout.root}")

    def _build_models_if_missing(self) -> None:
        """`tailrace models build` into the embedded models_dir when the profile needs it and it is empty."""
        models_dir = Path(self.profile.embedded.models_dir)
        if needs_models_build(self.profile):
            self.log(f"building models into {models_dir}")
            options = ModelsBuildOptions(out=models_dir, mm1_mean_ms=self.profile.embedded.mm1_mean_ms or 2.0)
            build = start_process("models build", internal_argv(MODELS_BUILD, options), self.layout.log("models-build"))
            try:
                code = build.popen.wait()
            except BaseException:  # Ctrl-C or SIGTERM while it builds: it is stopped too
                build.stop()
                raise
            if code != 0:
                raise RuntimeError(f"building models into {models_dir} failed:\n{build.log_tail()}")

    def _start_sntp_if_asked(self) -> list[str]:
        """The profile's clock references, with 'embedded' replaced by an SNTP server this run starts."""
        servers = list(self.profile.clock.servers)
        if EMBEDDED not in servers and MASTER_CLOCK not in servers:
            return servers
        port = free_port()  # on one machine, the master's reference and the embedded one are the same thing
        self.processes.append(start_process("sntp", internal_argv(SNTP_SERVER, SntpOptions(port=port)),
                                            self.layout.log("sntp")))
        return [f"127.0.0.1:{port}" if s in (EMBEDDED, MASTER_CLOCK) else s for s in servers]

    @property
    def triton(self) -> TritonServer | None:
        """The local Triton of this run, if it has one."""
        if self.servers is None:
            return None
        return next((s.triton for s in self.servers.instances if s.triton is not None), None)

    def _cold_starts(self) -> dict[str, dict]:
        """endpoint → how its server's first requests went, for endpoints whose server this run started."""
        if self.servers is None:
            return {}
        out = {}
        for ep in self.profile.endpoints:
            server = self.servers.serving(self.plan.endpoint_kinds[ep.name], ep.model)
            if server is not None and server.cold_start:
                out[ep.name] = server.cold_start
        return out

    def wait(self, progress) -> int:
        """Wait for the master to finish, showing progress (`progress(run)`); returns the master's exit code."""
        self.lifecycle.watch(lambda: progress(self))
        return self.lifecycle.master.popen.returncode

    def stop(self) -> None:
        """Take the servers' last statistics, then stop every process we started, newest first, by PID (Triton
        with its children and shm segments) — whatever else fails."""
        try:
            if self.lifecycle is not None:
                self.lifecycle.snapshot_after()
        finally:
            owned = {id(s.process): s for s in self.servers.instances} if self.servers is not None else {}
            # Triton with its children and shared memory; one that fails to stop leaves none of the others running
            stop_each(owned[id(proc)].triton.stop if id(proc) in owned and owned[id(proc)].triton is not None
                      else partial(proc.stop, timeout=10) for proc in reversed(self.processes))

    def manifest(self, interrupted: bool) -> dict:
        self.lifecycle.interrupted = self.lifecycle.interrupted or interrupted
        return self.lifecycle.manifest()


def run_local(profile: Profile, out: Path, quiet: bool = False, live: LivePage | None = None,
              token: str | None = None, before_load: Callable[[], object] | None = None) -> tuple[Path, dict]:
    """Run a profile locally end to end, shown on `live` if given; returns (run_dir, manifest). `before_load`:
    called once the endpoints are up, before the load generators start (what must not share the load's cores)."""
    from tailrace.harness.orchestration.progress import Progress

    run = LocalRun(profile, out, quiet=quiet, live=live, before_load=before_load,
                   **({"token": token} if token else {}))
    interrupted = False
    progress = Progress(quiet)
    with sigterm_as_interrupt():
        try:
            run.start()
            run.wait(progress.update)
        except KeyboardInterrupt:
            interrupted = True
            run.log("interrupted: stopping every process of this run")
        finally:
            progress.close()
            run.stop()
    if run.lifecycle is None or run.lifecycle.record is None:
        if interrupted:  # Ctrl-C or SIGTERM while the servers started: nothing was sent, every process stopped
            raise KeyboardInterrupt
        raise RuntimeError("run did not start")
    run.lifecycle.interrupted = run.lifecycle.interrupted or interrupted
    return run.run_dir, run.lifecycle.close()
