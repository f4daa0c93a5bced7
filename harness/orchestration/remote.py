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

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from contract.exit_codes import INVALID, OK, USAGE
from contract.layout import RunLayout
from contract.master_events import PLAN_SENT, WORKER_ADMITTED, WORKER_REFUSED
from contract.plan import unresolved_plan
from contract.profile import EMBEDDED, MASTER_CLOCK, Profile
from harness.orchestration.disk_space import low_disk_reason, min_free_bytes, stop_reason
from harness.orchestration.endpoint_check import EndpointCheckError, resolve_requests
from harness.orchestration.local_run import (
    LEAD_S,
    locust_argv,
    log_effective_settings,
    master_argv,
    new_run_id,
)
from harness.orchestration.progress import ChunkProgress
from harness.orchestration.run_record import RunRecord, save_model_metadata, started_manifest, write_manifest
from harness.orchestration.server_stats import ServerStatsRecorder, stats_targets
from harness.services.processes import die_with_parent, start_process, tailrace_argv
from harness.worker.identity import PLAN_ENV, TOKEN_ENV, WorkerIdentity

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


def waiting_for(profile: Profile, admitted: list[dict]) -> list[str]:
    """Regions still short of workers, as 'region (k of n)'."""
    have: dict[str, int] = {}
    for event in admitted:
        have[event["region"]] = have.get(event["region"], 0) + 1
    return [f"{r.name} ({have.get(r.name, 0)} of {r.workers})" for r in profile.regions if have.get(r.name, 0) < r.workers]


def _events(layout: RunLayout) -> list[dict]:
    try:
        lines = layout.master_events.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line being written
    return out


def run_master(profile: Profile, out: Path, bind: str, port: int, models: Path | None, token: str | None = None,
               sntp_port: int = 12300, wait_s: float = WAIT_FOR_WORKERS_S,
               quiet: bool = False) -> tuple[Path | None, int]:
    """Run a Locust master for the profile's workers; writes the run directory on this host. Returns (run
    directory to analyse, code): (None, 2) when nothing could start, (None, 4) when the workers never came,
    else the Locust master's exit code."""
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
        token = secrets.token_urlsafe(24)
        print(f"tailrace master: no run token given; this run's token is {token}\n"
              f"  give it to each worker: TAILRACE_RUN_TOKEN=... or --token-file FILE")
    run_id = new_run_id(profile)
    models_dir = str((models or Path(profile.embedded.models_dir)).resolve())
    plan = unresolved_plan(profile, run_id, str((out / run_id).resolve()), models_dir, LEAD_S)
    if MASTER_CLOCK in profile.clock.servers:  # the workers resolve "master" to the host they reached us at
        plan = plan.model_copy(update={"ntp_servers": [f"{MASTER_CLOCK}:{sntp_port}" if s == MASTER_CLOCK else s
                                                       for s in plan.ntp_servers]})
    try:  # data files live on the workers' hosts: relative paths are read from each worker's directory
        requests, notes = resolve_requests(plan, data_here=False)
    except EndpointCheckError as exc:
        print(f"tailrace master: an endpoint cannot take the run's requests; no load was sent:\n{exc}",
              file=sys.stderr)
        return None, USAGE
    for note in notes:
        print(f"tailrace master: {note}")
    plan = plan.model_copy(update={"requests": requests})
    layout = RunLayout(out / run_id)
    try:
        layout.root.mkdir(parents=True)
        plan.write(layout)
        write_manifest(layout, started_manifest(profile, run_id))  # replaced when the run ends
        log_effective_settings(plan, layout)
    except OSError as exc:
        print(f"tailrace master: the run directory cannot be written ({exc}); no load was sent", file=sys.stderr)
        return None, USAGE
    low = low_disk_reason(layout.root, reserve)
    if low is not None:
        print(f"tailrace master: {low}; no load was sent — free some space or choose another --out",
              file=sys.stderr)
        return None, USAGE
    sntp = None
    if MASTER_CLOCK in profile.clock.servers:
        sntp = start_process("sntp", tailrace_argv("sntp", "--host", bind, "--port", str(sntp_port)),
                             layout.log("sntp"), with_parent=True)
    n = sum(r.workers for r in profile.regions)
    # headless: Locust's own statistics would be empty (tailrace records requests itself); the live table is ours
    ui = ["--headless"]
    print(f"tailrace master: run {run_id}, waiting for {n} worker(s) on {bind}:{port}; results → {layout.root}")
    targets = stats_targets(plan)
    stats = ServerStatsRecorder(layout, targets, profile.server_stats.interval_s)
    save_model_metadata(plan, layout)
    stats.snapshot("before")
    record = RunRecord(plan, layout, servers=[t.describe() for t in targets])
    # --stop-timeout: a worker's last files reach the master after its schedule (harness/spool/uplink.py)
    master = subprocess.Popen(master_argv(plan, bind, port, int(wait_s), *ui, "--stop-timeout", "40",
                                          "--loglevel", "WARNING"),
                              env={**os.environ, PLAN_ENV: str(layout.plan), TOKEN_ENV: token},
                              stdout=open(layout.log("master"), "ab"), stderr=subprocess.STDOUT,
                              preexec_fn=die_with_parent)
    progress = ChunkProgress(layout, quiet)
    interrupted, last_wait, reported = False, 0.0, set()
    write_errors: list[str] = []  # why the run was stopped early: its directory could not (or soon cannot) be written
    try:
        while master.poll() is None:
            events = _events(layout)
            started = any(PLAN_SENT.matches(e) for e in events)
            for e in events:
                key = (e["event"], e.get("client_id"), e.get("t_ns"))
                if WORKER_REFUSED.matches(e) and key not in reported:
                    reported.add(key)
                    print(f"tailrace master: refused worker {e.get('worker')} ({e.get('region')}): {e['reason']}")
            if not started and time.monotonic() - last_wait > 5:
                missing = waiting_for(profile, [e for e in events if WORKER_ADMITTED.matches(e)])
                if missing:
                    print(f"tailrace master: waiting for {', '.join(missing)}", flush=True)
                last_wait = time.monotonic()
            if started:
                progress.update(run_id)
            low = stop_reason(stats, layout.root, reserve) if not write_errors else None  # once: one SIGINT
            if low is not None:  # stop while the manifest and the report still fit; workers keep unsent chunks
                write_errors.append(low)
                print(f"tailrace master: {low}: stopping the run (the workers keep the chunks not yet written in "
                      "their spools: `tailrace collect` adds them once there is room)", file=sys.stderr, flush=True)
                master.send_signal(signal.SIGINT)  # Locust stops its workers and exits
            time.sleep(0.5)
    except KeyboardInterrupt:
        interrupted = True
        master.send_signal(signal.SIGINT)
        master.wait(timeout=30)
    finally:
        progress.close()
        if sntp is not None:
            sntp.stop()
    code = master.returncode
    try:
        stats.snapshot("after")
    except OSError as exc:
        write_errors.append(str(exc))
        print(f"tailrace master: the last server statistics were not saved: {exc}", file=sys.stderr, flush=True)
    finally:
        stats.close()
    events = _events(layout)
    if not any(PLAN_SENT.matches(e) for e in events) and not interrupted:
        missing = waiting_for(profile, [e for e in events if WORKER_ADMITTED.matches(e)])
        reason = f"gave up after {wait_s:.0f} s waiting for {', '.join(missing) or 'workers'}; no load was sent"
        print(f"tailrace master: {reason}", file=sys.stderr)
        _write_end_manifest(layout, record.manifest(False, never_started=reason, write_errors=write_errors))
        return None, INVALID  # INVALID, and nothing to analyse
    stopped_by_us = interrupted or bool(write_errors)
    lost_s = (time.time_ns() - record.started_ns) / 1e9 if code not in (0, None) and not stopped_by_us else None
    _write_end_manifest(layout, record.manifest(interrupted, master_lost_s=lost_s, master_code=code,
                                                write_errors=write_errors))
    return layout.root, code


def _write_end_manifest(layout: RunLayout, manifest: dict) -> None:
    """The manifest as the run ended; when it cannot be written (a full disk), the one written at the start
    stays and says the run did not end (INVALID)."""
    try:
        write_manifest(layout, manifest)
    except OSError as exc:
        print(f"tailrace master: the final manifest was not written ({exc}); {layout.manifest} still says the "
              "run did not end", file=sys.stderr, flush=True)


def run_worker(master: str, region: str, index: int, skew_ms: float, endpoint_urls: list[str], out_dir: str | None,
               models: str | None, metrics_port: int | None, spool: str | None = None,
               token: str | None = None, metrics_bind: str | None = None) -> int:
    """Exec a Locust worker with this region's settings (and the run token) in its environment."""
    host, _, port = master.rpartition(":")
    if not host or not port.isdigit():
        print(f"tailrace worker: --master must be HOST:PORT, got {master!r}", file=sys.stderr)
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
    identity = WorkerIdentity(region, index, skew_ms, urls or None, out_dir, models, metrics_port=metrics_port,
                              metrics_bind=metrics_bind, spool=spool, master_host=host)
    argv = locust_argv("--worker", "--master-host", host, "--master-port", port)
    os.execvpe(argv[0], argv, {**os.environ, **identity.env(), TOKEN_ENV: token})
    return OK  # not reached
