"""`tailrace master` and `tailrace worker`: the same engine across machines.

The master runs the whole run: it checks the endpoints, waits for the profile's workers per region (printing
which are missing), admits only workers that prove the run's token, announces the plan, answers SNTP for them
when the profile's clock names "master", writes the files they send into the run directory
(harness/spool/uplink.py), and writes the manifest; `tailrace master` then analyses the run and exits with
the verdict's code. A worker keeps its results in a spool on its own disk until the master has them.

The master binds 127.0.0.1 unless told otherwise: Locust's channel is unauthenticated (the token keeps
strangers out of a run, not eavesdroppers), so reach it from other regions through an SSH tunnel or a private
network (see README).
"""
from __future__ import annotations

import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tailrace.contract.exit_codes import INVALID, OK, USAGE
from tailrace.contract.internal_processes import SNTP_SERVER, ListenError, SntpOptions, check_listen, internal_argv
from tailrace.contract.layout import RunLayout
from tailrace.contract.master_events import PLAN_SENT, WORKER_ADMITTED, WORKER_REFUSED
from tailrace.contract.plan import unresolved_plan
from tailrace.contract.profile import EMBEDDED, MASTER_CLOCK, Profile
from tailrace.harness.orchestration.disk_space import LowDiskError, min_free_bytes
from tailrace.harness.orchestration.endpoint_check import EndpointCheckError, resolve_requests
from tailrace.harness.orchestration.lifecycle import (
    LEAD_S,
    RunLifecycle,
    create_run_directory,
    interrupted_before_requests,
    locust_argv,
    new_run_id,
    waiting_for,
)
from tailrace.harness.orchestration.live_page import LivePage
from tailrace.harness.orchestration.preflight import unwritable
from tailrace.harness.orchestration.progress import ChunkProgress
from tailrace.harness.orchestration.server_stats import stats_targets
from tailrace.harness.services.otlp_receiver import ReceiverBindError
from tailrace.harness.services.processes import start_process
from tailrace.harness.worker.identity import TOKEN_ENV, WorkerIdentity

WAIT_FOR_WORKERS_S = 600


def read_token(token_file: Path | None) -> str | None:
    """The run token: --token-file's first line, else $TAILRACE_RUN_TOKEN; None when neither is given."""
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise ValueError(f"--token-file {token_file}: {exc.strerror}") from None
        if not token:
            raise ValueError(f"--token-file {token_file}: the file is empty")
        return token
    return os.environ.get(TOKEN_ENV) or None


@dataclass
class RemoteWorkers:
    """The run's workers, on other machines: started there (`tailrace worker`); the master prints whom it still
    waits for and whom it refused, and shows their progress from the chunks they send."""

    profile: Profile
    layout: RunLayout
    run_id: str
    max_wait_s: int
    quiet: bool = False
    stop_timeout_s: int = 40  # a worker's last files reach the master after its schedule (harness/spool/uplink.py)
    _reported: set = field(default_factory=set)
    _last_wait: float = 0.0
    progress: ChunkProgress | None = None

    def start(self, master_port: int, token: str) -> None:
        self.progress = ChunkProgress(self.layout, self.quiet)

    def follow(self, events: list[dict]) -> None:
        for e in WORKER_REFUSED.among(events):
            key = (e.get("client_id"), e.get("t_ns"))
            if key not in self._reported:
                self._reported.add(key)
                print(f"tailrace master: refused worker {e.get('worker')} ({e.get('region')}): {e['reason']}")
        if PLAN_SENT.first(events) is not None:
            self.progress.update(self.run_id)
        elif time.monotonic() - self._last_wait > 5:
            missing = waiting_for(self.profile, WORKER_ADMITTED.among(events))
            if missing:
                print(f"tailrace master: waiting for {', '.join(missing)}", flush=True)
            self._last_wait = time.monotonic()

    def exit_codes(self) -> None:
        return None  # their processes are on other machines

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()


def new_token() -> str:
    """A run token made here, printed for the workers (no --token-file, no $TAILRACE_RUN_TOKEN)."""
    token = secrets.token_urlsafe(24)
    print(f"tailrace master: no run token given; this run's token is {token}\n"
          f"  give it to each worker: TAILRACE_RUN_TOKEN=... or --token-file FILE")
    return token


def run_master(profile: Profile, out: Path, bind: str, port: int, models: Path | None, token: str | None = None,
               sntp_port: int = 12300, wait_s: float = WAIT_FOR_WORKERS_S,
               quiet: bool = False, live: LivePage | None = None) -> tuple[Path | None, int]:
    """Run a Locust master for the profile's workers; writes the run directory on this host. Returns (run
    directory to analyse, code): (None, USAGE) when nothing could start, (None, INVALID) when the workers never
    came, else the Locust master's exit code."""
    if profile.uses_embedded or profile.uses_triton or EMBEDDED in profile.clock.servers:
        print("tailrace master: profiles with 'embedded'/'triton' endpoints or 'embedded' clock servers are for "
              "`tailrace run`; name real endpoint URLs, and NTP servers or \"master\"", file=sys.stderr)
        return None, USAGE
    try:
        reserve = min_free_bytes()
    except ValueError as exc:
        print(f"tailrace master: {exc}", file=sys.stderr)
        return None, USAGE
    if token is None:
        token = new_token()
    run_id = new_run_id(profile)
    models_dir = str((models or Path(profile.embedded.models_dir)).resolve())
    plan = unresolved_plan(profile, run_id, str((out / run_id).resolve()), models_dir, LEAD_S)
    if MASTER_CLOCK in profile.clock.servers:  # the workers resolve "master" to the host they reached us at
        plan = plan.model_copy(update={"ntp_servers": [f"{MASTER_CLOCK}:{sntp_port}" if s == MASTER_CLOCK else s
                                                       for s in plan.ntp_servers]})
    try:  # data files live on the workers' hosts: relative paths are read from each worker's directory
        checked = resolve_requests(plan, data_here=False)
    except EndpointCheckError as exc:
        print(f"tailrace master: {exc.headline}; no load was sent:\n{exc}",
              file=sys.stderr)
        return None, USAGE
    for note in checked.notes:
        print(f"tailrace master: {note}")
    plan = plan.model_copy(update={"requests": checked.requests, "model_inputs": checked.model_inputs})
    if (taken := _master_ports_taken(bind, port, sntp_port if MASTER_CLOCK in profile.clock.servers else None)):
        print(f"tailrace master: {taken}; no load was sent", file=sys.stderr)  # before its run directory exists
        return None, USAGE
    layout = RunLayout(out / run_id)
    lifecycle = RunLifecycle(plan, layout, reserve, "tailrace master", quiet, live=live)
    try:
        create_run_directory(layout, profile, run_id, reserve)
        lifecycle.open(stats_targets(plan))
    except (LowDiskError, ReceiverBindError) as exc:
        print(f"tailrace master: {exc}", file=sys.stderr)
        return None, USAGE
    except OSError as exc:
        print(f"tailrace master: the run directory cannot be written ({exc}); no load was sent", file=sys.stderr)
        return None, USAGE
    sntp, workers = None, None
    n = sum(r.workers for r in profile.regions)
    try:  # from the run directory on, a Ctrl-C or SIGTERM ends it INVALID, whenever it lands (a loaded CI host's
        # landed between the "waiting" line and the Locust master's start, and the run ended as a bare "interrupted")
        if MASTER_CLOCK in profile.clock.servers:
            sntp = start_process("sntp", internal_argv(SNTP_SERVER, SntpOptions(host=bind, port=sntp_port)),
                                 layout.log("sntp"), with_parent=True)
        workers = RemoteWorkers(profile, layout, run_id, int(wait_s), quiet)
        print(f"tailrace master: run {run_id}, waiting for {n} worker(s) on {bind}:{port}; results → {layout.root}")
        lifecycle.start(workers, bind, port, token)
        lifecycle.watch(lambda: None)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM before or while the Locust master started (watch handles it after)
        lifecycle.interrupted = lifecycle.signalled = True
        if lifecycle.master is not None:
            lifecycle.master.stop()
    finally:
        if workers is not None:
            workers.close()
        if sntp is not None:
            sntp.stop()
    lifecycle.close()
    if lifecycle.never_started() is not None:
        return None, INVALID  # nothing to analyse
    if interrupted_before_requests("tailrace master", layout, lifecycle.interrupted):  # while it waited for workers
        return None, INVALID
    return layout.root, lifecycle.master.popen.returncode


def _master_ports_taken(bind: str, port: int, sntp_port: int | None) -> str | None:
    """Which of the master's ports cannot listen on `bind` (the workers' port; the SNTP one where the clock is the
    master's), naming its flag — or None."""
    for flag, at, udp in (("--port", port, False), ("--sntp-port", sntp_port, True)):
        if at is not None:
            try:
                check_listen(bind, at, udp)
            except ListenError as exc:
                return f"{flag}: {exc}"
    return None


def _worker_setup_problem(spool: str | None, out_dir: str | None, metrics_port: int | None,
                          metrics_bind: str | None) -> str | None:
    """What of a worker's own flags cannot work on this machine (its spool or shared directory cannot be written, its
    metrics port cannot listen), or None — checked before it waits for its master."""
    for flag, directory in (("--spool", spool), ("--out-dir", out_dir)):
        if directory is not None and (why := unwritable(Path(directory))) is not None:
            return f"{flag}: {directory} {why}"
    if metrics_port:  # (0: a port the kernel chooses)
        try:
            check_listen(metrics_bind or "127.0.0.1", metrics_port)
        except ListenError as exc:
            return f"--metrics-port: {exc}"
    return None


def run_worker(master: str, region: str, index: int, skew_ms: float, endpoint_urls: list[str], out_dir: str | None,
               models: str | None, metrics_port: int | None, spool: str | None = None,
               token: str | None = None, metrics_bind: str | None = None, master_timeout_s: float | None = None) -> int:
    """Exec a Locust worker with this region's settings (and the run token) in its environment."""
    host, _, port = master.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        print(f"tailrace worker: --master must be HOST:PORT (a port 1-65535), got {master!r}", file=sys.stderr)
        return USAGE
    urls = {}
    for item in endpoint_urls:
        name, sep, url = item.partition("=")
        if not sep:
            print(f"tailrace worker: --endpoint-url must be NAME=URL, got {item!r}", file=sys.stderr)
            return USAGE
        urls[name] = url
    if token is None:
        print("tailrace worker: no run token: set TAILRACE_RUN_TOKEN or pass --token-file (the master prints or "
              "reads it)", file=sys.stderr)
        return USAGE
    spool = None if out_dir else str(Path(spool or "tailrace-spool").resolve())
    if (problem := _worker_setup_problem(spool, out_dir, metrics_port, metrics_bind)) is not None:
        print(f"tailrace worker: {problem}", file=sys.stderr)  # said now, not once it has waited for its master
        return USAGE
    identity = WorkerIdentity(region, index, skew_ms, urls or None, out_dir, models, metrics_port=metrics_port,
                              metrics_bind=metrics_bind, spool=spool, master_host=host,
                              master_timeout_s=master_timeout_s)
    argv = locust_argv("--worker", "--master-host", host, "--master-port", port)
    os.execvpe(argv[0], argv, {**os.environ, **identity.env(), TOKEN_ENV: token})
    return OK  # not reached
