"""One run's lifecycle, written once for `tailrace run` (workers on this machine, harness/orchestration/local_run.py)
and `tailrace master` (workers on other machines, harness/orchestration/remote.py).

    create_run_directory   the directory, its "running" manifest, the disk-space check
    RunLifecycle.open      plan.json, logs/settings.log, model metadata, server statistics "before", the record
    RunLifecycle.start     the Locust master (started one way: `start_master`), then the workers
    RunLifecycle.watch     progress, the disk, the master's end; Ctrl-C, the live page's stop control and a full
                           disk stop it with SIGTERM
    RunLifecycle.close     server statistics "after", the end manifest

What differs between the two is who starts the workers, how they are followed while the master waits for
them, how long it waits and how long a worker's last files may take: a `Workers` (`LocalWorkers`,
`RemoteWorkers`).
"""
from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Protocol

from tailrace.contract.layout import RunLayout, write_atomic
from tailrace.contract.master_events import PLAN_SENT, WORKER_ADMITTED, read_master_events
from tailrace.contract.plan import RunPlan
from tailrace.contract.profile import Profile
from tailrace.harness.orchestration.disk_space import LowDiskError, low_disk_reason, stop_reason
from tailrace.harness.orchestration.hardware_monitors import MonitorRecorder
from tailrace.harness.orchestration.live_page import LivePage
from tailrace.harness.orchestration.run_record import RunRecord, save_model_metadata, started_manifest, write_manifest
from tailrace.harness.orchestration.server_stats import ServerStatsRecorder, StatsTarget
from tailrace.harness.services.otlp_receiver import OtlpReceiver
from tailrace.harness.services.processes import ManagedProcess, start_process
from tailrace.harness.worker.identity import PLAN_ENV, TOKEN_ENV

LOCUSTFILE = Path(__file__).resolve().parents[1] / "control" / "locustfile.py"
LEAD_S = 6.0  # plan → start instant: time for workers to load data, pre-encode requests, sample clocks
MASTER_GRACE_S = 90.0  # past the plan's run time (and the wait for workers): a master still running is stopped


def new_run_id(profile: Profile) -> str:
    return f"{profile.name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(2)}"


def locust_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args]


def master_argv(plan: RunPlan, bind: str, port: int, max_wait_s: int, *extra: str) -> list[str]:
    """The Locust master of `plan`: one user per expected worker, for the plan's run time."""
    n = sum(r.workers for r in plan.profile.regions)
    return locust_argv("--master", "-u", str(n), "-r", str(n), "--expect-workers", str(n),
                       "--expect-workers-max-wait", str(max_wait_s), "-t", f"{plan.run_seconds:.0f}s",
                       "--master-bind-host", bind, "--master-bind-port", str(port), "--only-summary",
                       "--exit-code-on-error", "0", *extra)


def start_master(plan: RunPlan, layout: RunLayout, bind: str, port: int, token: str, max_wait_s: int,
                 stop_timeout_s: int, cpus: list[int] | None = None) -> ManagedProcess:
    """The Locust master, headless (tailrace records requests itself; the live table is ours), reading the plan
    from $TAILRACE_PLAN; it dies with this process, even by SIGKILL."""
    argv = master_argv(plan, bind, port, max_wait_s, "--headless", "--stop-timeout", str(stop_timeout_s),
                       "--loglevel", "WARNING")
    return start_process("locust master", argv, layout.log("master"),
                         env={PLAN_ENV: str(layout.plan), TOKEN_ENV: token}, cpus=cpus, with_parent=True)


def interrupted_before_requests(command: str, layout: RunLayout, interrupted: bool) -> bool:
    """Whether a run was interrupted before any request was recorded — then said in one line (INVALID, its directory
    kept with the manifest and the logs): there is nothing to analyse."""
    if not interrupted or layout.request_chunks():
        return False
    print(f"{command}: interrupted before any request was recorded: INVALID; {layout.root} keeps the manifest and the "
          "logs", file=sys.stderr)
    return True


def create_run_directory(layout: RunLayout, profile: Profile, run_id: str, reserve: int) -> None:
    """The run directory with its "running" manifest (replaced when the run ends); LowDiskError (nothing sent)
    when its disk has less than `reserve` bytes free; OSError when it cannot be written."""
    layout.root.mkdir(parents=True, exist_ok=False)
    write_manifest(layout, started_manifest(profile, run_id))
    low = low_disk_reason(layout.root, reserve)
    if low is not None:
        raise LowDiskError(f"{low}; no load was sent — free some space or choose another --out")


def log_effective_settings(plan: RunPlan, layout: RunLayout) -> None:
    """logs/settings.log: the plan's effective settings, one per line."""
    write_atomic(layout.log("settings"), "\n".join(plan.effective_settings()) + "\n")


class Workers(Protocol):
    """Who starts a run's workers and how the orchestrator follows them while the master runs."""

    max_wait_s: int  # how long the Locust master waits for them all to connect
    stop_timeout_s: int  # Locust's --stop-timeout: a worker's last files reach the master after its schedule

    def start(self, master_port: int, token: str) -> None:
        """Start them (or tell the user where they should connect)."""

    def follow(self, events: list[dict]) -> None:
        """Called about twice a second with the master's events so far (master-events.jsonl)."""

    def exit_codes(self) -> dict[str, int | None] | None:
        """How each worker process ended, when this machine started them (None: not ours to know)."""


@dataclass
class RunLifecycle:
    """The steps of one run that `tailrace run` and `tailrace master` share, in order: open, start, watch, close."""

    plan: RunPlan
    layout: RunLayout
    reserve: int  # free bytes kept on the run directory's disk (harness/orchestration/disk_space.py)
    command: str  # "tailrace run" / "tailrace master": the prefix of what it prints
    quiet: bool = False
    stats: ServerStatsRecorder | None = None
    monitors: MonitorRecorder | None = None
    record: RunRecord | None = None
    master: ManagedProcess | None = None
    master_started: float = 0.0  # time.monotonic() when the master was started
    workers: Workers | None = None
    interrupted: bool = False
    signalled: bool = False  # interrupted by Ctrl-C or SIGTERM (not the live page's stop): the caller stops too
    master_lost_s: float | None = None
    write_errors: list[str] = field(default_factory=list)  # why the run was stopped early: its disk
    unscraped: list[str] = field(default_factory=list)  # the servers' snapshots before or after not had: warnings
    live: LivePage | None = None  # the live page, when this command serves one
    receiver: OtlpReceiver | None = None  # the servers' spans, where the profile opens a receiver for them

    def say(self, message: str, error: bool = False) -> None:
        if error:
            print(f"{self.command}: {message}", file=sys.stderr, flush=True)
        elif not self.quiet:
            print(message, flush=True)

    def open(self, targets: list[StatsTarget], region_addresses: dict[str, str] | None = None) -> None:
        """Write the plan and its effective settings, the endpoints' model metadata and their statistics before
        any load; start the record the manifest is written from."""
        self.plan.write(self.layout)
        log_effective_settings(self.plan, self.layout)
        if self.live is not None:
            self.live.attach(self.layout)
        save_model_metadata(self.plan, self.layout)
        self.stats = ServerStatsRecorder(self.layout, targets, self.plan.profile.server_stats.interval_s)
        self.stats.snapshot("before")
        self.unscraped = self.stats.missed  # (after's added by snapshot_after, once the recorder is closed too)
        if self.plan.profile.monitors:  # scraped from now on: what the hardware did before the load too (its idle)
            self.monitors = MonitorRecorder(self.layout, self.plan.profile.monitors)
            self.monitors.periodic()
        self.record = RunRecord(self.plan, self.layout, servers=[t.describe() for t in targets],
                                region_addresses=region_addresses or {})
        receive = self.plan.profile.otel.receive
        if receive is not None:  # open before any load: a server's first span has somewhere to go
            self.receiver = OtlpReceiver(self.layout.server_spans, receive.host, receive.grpc_port, receive.http_port)
            self.receiver.start()
            self.say(f"OTLP receiver for the servers' spans: {self.receiver.grpc_url} (gRPC), "
                     f"{self.receiver.http_url} (HTTP)")

    def start(self, workers: Workers, bind: str, port: int, token: str, cpus: list[int] | None = None) -> None:
        """The Locust master on bind:port, then the workers."""
        self.workers = workers
        self.master_started = time.monotonic()
        self.master = start_master(self.plan, self.layout, bind, port, token, workers.max_wait_s,
                                   workers.stop_timeout_s, cpus)
        workers.start(port, token)

    def watch(self, progress: Callable[[], None]) -> None:
        """Until the master exits: follow the workers, show progress, and stop the run (SIGTERM: Locust stops its
        workers and exits) on Ctrl-C or when the disk nears full. A master still running well past the plan's
        run time is stopped; one that exits with an error on its own is recorded as lost."""
        deadline = time.monotonic() + self.workers.max_wait_s + self.plan.run_seconds + MASTER_GRACE_S
        stopping_since = None
        try:
            while self.master.alive() and time.monotonic() < deadline:
                self.workers.follow(read_master_events(self.layout))
                progress()
                low = stop_reason(self.stats, self.layout.root, self.reserve, self.monitors) \
                    if not self.write_errors else None
                if low is not None:  # stop while the manifest and the report still fit; workers keep unsent chunks
                    self.write_errors.append(low)
                    self.say(f"{low}: stopping the run (a worker on another host keeps the chunks not yet written "
                             "in its spool: `tailrace collect` adds them once there is room)", error=True)
                    stopping_since = self._stop_master(stopping_since)
                if self.live is not None and self.live.stop_requested.is_set() and not self.interrupted:
                    self.interrupted = True  # as Ctrl-C: INVALID, every row measured kept, the report written
                    self.say("stopped from the live page: stopping the run")
                    stopping_since = self._stop_master(stopping_since)
                if stopping_since is not None and time.monotonic() - stopping_since > self.workers.stop_timeout_s + 10:
                    break
                try:  # look again in 0.5 s, or at once when the master exits
                    self.master.popen.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
        except KeyboardInterrupt:
            self.interrupted = self.signalled = True
            self.say("interrupted: stopping the run")
            self._stop_master(None)
            try:
                self.master.popen.wait(timeout=30)
            except Exception:  # noqa: BLE001 — subprocess.TimeoutExpired, or a second Ctrl-C: stopped below
                pass
        if self.master.alive():
            if not self.write_errors and not self.interrupted:
                self.say("the Locust master did not finish in time; stopping it")
            self.master.stop()
        code = self.master.popen.returncode
        if (reason := self.never_started()) is not None:
            self.say(reason, error=True)
        elif code not in (0, None) and not (self.interrupted or self.write_errors):
            self.master_lost_s = (time.time_ns() - self.record.started_ns) / 1e9
            self.say(f"the Locust master exited with {code} after {self.master_lost_s:.0f} s: the run is INVALID",
                     error=True)

    def _stop_master(self, since: float | None) -> float:
        """SIGTERM: once Locust's main runs, its graceful stop (the workers told, the summary printed); before that —
        its imports, its wait for the workers — the default action, an end at once, with nothing sent yet. (A SIGINT
        there raised KeyboardInterrupt inside an import, and the master could hang until it was killed 30 s later.)"""
        if since is None and self.master.alive():
            self.master.popen.send_signal(signal.SIGTERM)
        return since if since is not None else time.monotonic()

    def never_started(self) -> str | None:
        """Why no load was sent, when the master ended by itself without sending the plan (its workers never
        came): else None (a master killed by a signal is lost, not waiting)."""
        code = self.master.popen.returncode if self.master is not None else None
        if code is None or code < 0 or self.interrupted:
            return None
        events = read_master_events(self.layout)
        if PLAN_SENT.first(events) is not None:
            return None
        missing = waiting_for(self.plan.profile, WORKER_ADMITTED.among(events))
        waited = time.monotonic() - self.master_started
        if waited < 0.9 * self.workers.max_wait_s:  # it did not wait them out: it ended for its own reason
            return (f"the Locust master exited (code {code}) {waited:.0f} s after its start, before its plan, while "
                    f"waiting for {', '.join(missing) or 'workers'} (its log: {self.layout.log('master')}); no load "
                    "was sent")
        return (f"gave up after {self.workers.max_wait_s:.0f} s waiting for {', '.join(missing) or 'workers'}; "
                "no load was sent")

    def close_receiver(self) -> None:
        """The servers' last spans waited for (`linger_s`: they batch them), then the receiver closed; idempotent."""
        if self.receiver is None:
            return
        time.sleep(self.plan.profile.otel.receive.linger_s)
        self.receiver.stop()
        self.say(f"{self.receiver.spans:,} server spans received" + (
            f", {self.receiver.refused:,} export requests refused (not OTLP)" if self.receiver.refused else ""))
        self.receiver = None

    def snapshot_after(self) -> None:
        """The servers' last spans and statistics after the run (a full disk is recorded, never raised); idempotent."""
        self.close_receiver()
        if self.monitors is not None:
            try:
                self.monitors.periodic(float("inf"))  # one last scrape of every monitor: the load's end
            except OSError as exc:
                self.write_errors.append(str(exc))
            finally:
                self.monitors.close()
                self.monitors = None
        if self.stats is None:
            return
        try:
            self.stats.snapshot("after")
        except OSError as exc:
            self.write_errors.append(str(exc))
            self.say(f"the last server statistics were not saved: {exc}", error=True)
        finally:
            self.stats.close()
            self.stats = None

    def manifest(self) -> dict:
        """The manifest as the run ended."""
        code = self.master.popen.returncode if self.master is not None and self.master_lost_s is not None else None
        return self.record.manifest(self.interrupted, self.workers.exit_codes() if self.workers else None,
                                    self.master_lost_s, code, never_started=self.never_started(),
                                    write_errors=self.write_errors, warnings=self.unscraped)

    def close(self) -> dict:
        """Statistics after, then the end manifest (when it cannot be written — a full disk — the one written at
        the start stays and says the run did not end: INVALID). Returns the manifest."""
        self.snapshot_after()
        manifest = self.manifest()
        try:
            write_manifest(self.layout, manifest)
        except OSError as exc:
            self.say(f"the final manifest was not written ({exc}); {self.layout.manifest} still says the run did "
                     "not end", error=True)
        return manifest


def waiting_for(profile: Profile, admitted: list[dict]) -> list[str]:
    """Regions still short of workers, as 'region (k of n)'."""
    have: dict[str, int] = {}
    for event in admitted:
        have[event["region"]] = have.get(event["region"], 0) + 1
    return [f"{r.name} ({have.get(r.name, 0)} of {r.workers})" for r in profile.regions if have.get(r.name, 0) < r.workers]


def write_cold_starts(layout: RunLayout, cold_starts: dict[str, dict]) -> None:
    """endpoints/<name>/cold-start.json for endpoints whose server this run started (and timed)."""
    for endpoint, cold_start in cold_starts.items():
        write_atomic(layout.cold_start(endpoint), json.dumps(cold_start))
