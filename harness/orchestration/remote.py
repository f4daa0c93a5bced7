"""`tailrace master` and `tailrace worker`: the same engine across machines.

The master binds 127.0.0.1 unless told otherwise: Locust's channel is unauthenticated, so reach it from
other regions through an SSH tunnel or a private network (see README).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from contract.layout import RunLayout
from contract.plan import unresolved_plan
from contract.profile import EMBEDDED, Profile
from harness.orchestration.endpoint_check import EndpointCheckError, resolve_requests
from harness.orchestration.local_run import (
    LEAD_S,
    PLAN_ENV,
    locust_argv,
    log_effective_settings,
    master_argv,
    new_run_id,
)
from harness.orchestration.run_record import RunRecord, save_model_metadata, write_manifest
from harness.orchestration.server_stats import ServerStatsRecorder, stats_targets
from harness.worker.identity import WorkerIdentity


def run_master(profile: Profile, out: Path, bind: str, port: int, models: Path | None,
               web_port: int | None = None) -> int:
    """Run a Locust master that waits for the profile's workers; writes the manifest at the end."""
    if profile.uses_embedded or profile.uses_triton or EMBEDDED in profile.clock.servers:
        print("tailrace master: profiles with 'embedded'/'triton' endpoints or 'embedded' clock servers are for "
              "`tailrace run`; name real endpoint URLs and NTP servers", file=sys.stderr)
        return 2
    run_id = new_run_id(profile)
    models_dir = str((models or Path(profile.embedded.models_dir)).resolve())
    plan = unresolved_plan(profile, run_id, str((out / run_id).resolve()), models_dir, LEAD_S)
    try:  # data files live on the workers' hosts: relative paths are read from each worker's directory
        requests, notes = resolve_requests(plan, data_here=False)
    except EndpointCheckError as exc:
        print(f"tailrace master: an endpoint cannot take the run's requests; no load was sent:\n{exc}",
              file=sys.stderr)
        return 2
    for note in notes:
        print(f"tailrace master: {note}")
    plan = plan.model_copy(update={"requests": requests})
    layout = RunLayout(out / run_id)
    layout.root.mkdir(parents=True)
    plan.write(layout)
    log_effective_settings(plan, layout)
    n = sum(r.workers for r in profile.regions)
    ui = ["--autostart", "--autoquit", "5", "--web-host", "127.0.0.1", "--web-port", str(web_port)] if web_port \
        else ["--headless"]
    print(f"tailrace master: run {run_id}, waiting for {n} worker(s) on {bind}:{port}; chunks → {layout.root}")
    targets = stats_targets(plan)
    stats = ServerStatsRecorder(layout, targets, profile.server_stats.interval_s)
    save_model_metadata(plan, layout)
    stats.snapshot("before")
    record = RunRecord(plan, layout, servers=[{k: v for k, v in vars(t).items() if k != "auth"} for t in targets])
    master = subprocess.Popen(master_argv(plan, bind, port, 600, *ui), env={**os.environ, PLAN_ENV: str(layout.plan)})
    interrupted = False
    try:
        while master.poll() is None:
            if stats.due():
                stats.periodic()
            time.sleep(0.5)
    except KeyboardInterrupt:
        interrupted = True
        master.send_signal(signal.SIGINT)
        master.wait(30)
    code = master.returncode
    stats.snapshot("after")
    stats.close()
    lost_s = (time.time_ns() - record.started_ns) / 1e9 if code not in (0, None) and not interrupted else None
    write_manifest(layout, record.manifest(interrupted, master_lost_s=lost_s, master_code=code))
    return code


def run_worker(master: str, region: str, index: int, skew_ms: float, endpoint_urls: list[str], out_dir: str | None,
               models: str | None, metrics_port: int | None) -> int:
    """Exec a Locust worker with this region's settings in its environment."""
    host, _, port = master.rpartition(":")
    if not host or not port.isdigit():
        print(f"tailrace worker: --master must be HOST:PORT, got {master!r}", file=sys.stderr)
        return 2
    urls = {}
    for item in endpoint_urls:
        name, sep, url = item.partition("=")
        if not sep:
            print(f"tailrace worker: --endpoint-url must be NAME=URL, got {item!r}", file=sys.stderr)
            return 2
        urls[name] = url
    identity = WorkerIdentity(region, index, skew_ms, urls or None, out_dir, models, metrics_port)
    argv = locust_argv("--worker", "--master-host", host, "--master-port", port)
    os.execvpe(argv[0], argv, {**os.environ, **identity.env()})
    return 0  # not reached
