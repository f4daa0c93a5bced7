"""`tailrace master` and `tailrace worker`: the same engine across machines.

The master binds 127.0.0.1 unless told otherwise: Locust's channel is unauthenticated, so reach it from
other regions through an SSH tunnel or a private network (see README).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from harness.manifest import write_manifest
from harness.orchestrate import LocalRun, locust_argv, master_config, new_run_id, run_seconds, worker_env
from harness.profile import EMBEDDED, Profile


def run_master(profile: Profile, out: Path, bind: str, port: int, models: Path | None,
               web_port: int | None = None) -> int:
    """Run a Locust master that waits for the profile's workers; writes the manifest at the end."""
    if profile.uses_embedded or profile.uses_triton or EMBEDDED in profile.clock.servers:
        print("tailrace master: profiles with 'embedded'/'triton' endpoints or 'embedded' clock servers are for "
              "`tailrace run`; "
              "name real endpoint URLs and NTP servers", file=sys.stderr)
        return 2
    run_id = new_run_id(profile)
    run_dir = out / run_id
    run_dir.mkdir(parents=True)
    models_dir = models or Path(profile.embedded.models_dir)
    cfg = master_config(run_id, run_dir, list(profile.clock.servers), models_dir,
                        profile.model_dump(mode="json"))
    (run_dir / "master-config.json").write_text(json.dumps(cfg, indent=2))
    n = sum(r.workers for r in profile.regions)
    ui = ["--autostart", "--web-host", "127.0.0.1", "--web-port", str(web_port)] if web_port else ["--headless"]
    argv = locust_argv("--master", *ui, "-u", str(n), "-r", str(n), "--expect-workers", str(n),
                       "--expect-workers-max-wait", "600", "-t", f"{run_seconds(profile):.0f}s",
                       "--master-bind-host", bind, "--master-bind-port", str(port), "--only-summary",
                       "--exit-code-on-error", "0", *(["--autoquit", "5"] if web_port else []))
    print(f"tailrace master: run {run_id}, waiting for {n} worker(s) on {bind}:{port}; chunks → {run_dir}")
    env = {**os.environ, "TAILRACE_MASTER_CONFIG": str(run_dir / "master-config.json")}
    import subprocess

    run = LocalRun(profile, out, run_id=run_id, run_dir=run_dir)
    run.plan_server_stats(profile.model_dump(mode="json"))
    run.save_model_metadata()
    run.stats.snapshot("before")
    master = subprocess.Popen(argv, env=env)
    try:
        while master.poll() is None:
            if run.stats.due():
                run.stats.periodic()
            time.sleep(0.5)
    except KeyboardInterrupt:
        master.send_signal(signal.SIGINT)
        master.wait(30)
    code = master.returncode
    run.stats.snapshot("after")
    run.stats.close()
    write_manifest(run_dir, run.manifest(interrupted=code not in (0, None)))
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
    env = {**os.environ, **worker_env(region, index, skew_ms, urls, metrics_port, out_dir, models)}
    argv = locust_argv("--worker", "--master-host", host, "--master-port", port)
    os.execvpe(argv[0], argv, env)
    return 0  # not reached
