"""The run's record: the manifest (resolved plan, seed, versions, host, git sha, start/end, workers, validity),
the models' metadata, and the master's event log it is built from."""
from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from tailrace.contract.layout import RunLayout, write_atomic
from tailrace.contract.master_events import (
    PLAN_SENT,
    START_SENT,
    WORKER_ADMITTED,
    WORKER_DONE,
    WORKER_ERROR,
    WORKER_HELLO,
    WORKER_JOINED,
    WORKER_LEFT,
    read_master_events,
)
from tailrace.contract.plan import RunPlan
from tailrace.harness.orchestration.host_cpu import CpuTimes, cpu_usage, read_cpu_times, steal_warning

_PACKAGES = ("tailrace", "locust", "gevent", "grpcio", "numpy", "scipy", "pandas", "pyarrow", "onnxruntime",
             "tritonclient", "ntplib", "prometheus-client", "pydantic", "uvicorn", "starlette")


def versions() -> dict[str, str]:
    """Installed versions of what a run depends on."""
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def host_info() -> dict:
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "pid": os.getpid()}


def git_sha(repo: Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo or Path(__file__).resolve().parents[2],
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def worker_errors(events: list[dict]) -> dict[str, str]:
    """Per worker: why it could not run the plan (its ERROR), by the name it was admitted as."""
    names = {e["client_id"]: e["worker"] for e in WORKER_ADMITTED.among(events)}
    return {names[e["client_id"]]: e["error"] for e in WORKER_ERROR.among(events) if e.get("client_id") in names}


def worker_timeline(events: list[dict], expected: list[str]) -> dict[str, dict]:
    """Per worker: when it joined, said hello, finished or left (epoch ns, master clock)."""
    by_client: dict[str, str] = {}
    joined: dict[str, int] = {}
    out: dict[str, dict] = {w: {"joined_ns": None, "done_ns": None, "left_ns": None, "left_reason": None}
                            for w in expected}
    for e in events:
        cid = e.get("client_id")
        if WORKER_JOINED.matches(e):
            joined[cid] = e["t_ns"]
        elif WORKER_HELLO.matches(e):
            by_client[cid] = e["worker"]
            out.setdefault(e["worker"], {"joined_ns": None, "done_ns": None, "left_ns": None, "left_reason": None})
            out[e["worker"]]["joined_ns"] = joined.get(cid, e["t_ns"])
        elif WORKER_DONE.matches(e):
            name = by_client.get(cid) or e.get("summary", {}).get("worker")
            if name:
                out.setdefault(name, {})["done_ns"] = e["t_ns"]
        elif WORKER_LEFT.matches(e):
            name = by_client.get(cid) or e.get("worker")
            if name and out.get(name, {}).get("left_ns") is None:
                out.setdefault(name, {})["left_ns"] = e["t_ns"]
                out[name]["left_reason"] = e.get("reason")
    return out


def write_manifest(layout: RunLayout, manifest: dict) -> None:
    """Write manifest.json atomically (temporary name + rename); an OSError names the file."""
    write_atomic(layout.manifest, json.dumps(manifest, indent=2, sort_keys=True, default=str))


def started_manifest(profile, run_id: str) -> dict:
    """The manifest a run directory holds while its run is under way: should tailrace stop before it writes
    the final one (killed, out of disk), the directory still says what it is, and that the run did not end."""
    return {"run_id": run_id, "profile_name": profile.name, "profile": profile.model_dump(mode="json"),
            "seed": profile.load.seed, "overrides": list(profile.overrides), "start_ns": time.time_ns(), "end_ns": None,
            "state": "running",
            "versions": versions(), "host": host_info(), "git_sha": git_sha(), "workers": {},
            "valid": False, "invalid_reasons": ["the run did not end: tailrace stopped before writing its end"],
            "warnings": []}


def save_model_metadata(plan: RunPlan, layout: RunLayout) -> None:
    """endpoints/<name>/model.json: the model's build metadata (size, parameters, accuracy, sha256), for the
    endpoints whose model repository is on this machine."""
    p = plan.profile
    for ep in p.endpoints:
        root = Path(p.triton.models_dir if plan.endpoint_kinds[ep.name] == "triton" else p.embedded.models_dir)
        meta = root / ep.model / "metadata.json"
        if meta.exists():
            write_atomic(layout.model_metadata(ep.name), meta.read_text())


def expected_workers(plan: RunPlan) -> list[str]:
    return [f"{r.name}-w{i}" for r in plan.profile.regions for i in range(r.workers)]


SHORTFALL_TOLERANCE = 0.001  # of a worker's planned requests (at least one request)


def shortfalls(summaries: dict[str, dict]) -> list[str]:
    """Why the run did not happen as planned: each worker that sent fewer requests than its schedule planned."""
    out = []
    for name, s in sorted(summaries.items()):
        planned, sent = s.get("planned") or 0, s.get("sent") or 0
        if planned - sent > max(1.0, SHORTFALL_TOLERANCE * planned):
            out.append(f"{name}: sent {sent:,} of {planned:,} planned requests ({sent / planned:.1%})")
    return out


def off_start(summaries: dict[str, dict], start_ref_ns: int | None) -> list[str]:
    """Workers that began at another instant than the run's (one that never heard the master's START began at the
    plan's): their part of the one arrival process is shifted in time, so the run is not the run planned."""
    if start_ref_ns is None:
        return []
    return [f"{name}: started {(s['start_ref_ns'] - start_ref_ns) / 1e9:+.1f} s from the run's start instant (it "
            "did not hear the master's START): its arrivals are shifted from the one arrival process"
            for name, s in summaries.items()
            if s.get("start_ref_ns") is not None and abs(s["start_ref_ns"] - start_ref_ns) > 1_000_000]


@dataclass
class RunRecord:
    """What the manifest needs beyond the plan: when the run started, the host's CPU at the start, the
    servers snapshotted, and how each local worker process ended (unknown for remote workers)."""

    plan: RunPlan
    layout: RunLayout
    started_ns: int = field(default_factory=time.time_ns)
    cpu_at_start: CpuTimes | None = field(default_factory=read_cpu_times)
    servers: list[dict] = field(default_factory=list)
    region_addresses: dict[str, str] = field(default_factory=dict)

    def manifest(self, interrupted: bool, worker_exit_codes: dict[str, int | None] | None = None,
                 master_lost_s: float | None = None, master_code: int | None = None,
                 never_started: str | None = None, write_errors: list[str] | None = None,
                 warnings: list[str] | None = None) -> dict:
        """The manifest as the run ended. `master_lost_s`: when the Locust master exited before the run's end
        (seconds after the run started), with `master_code`. `never_started`: why no load was sent at all.
        `write_errors`: files of the run directory the orchestrator could not write (a full disk). `warnings`: the
        orchestrator's own (a server's statistics before or after the load not had)."""
        p, layout = self.plan.profile, self.layout
        expected = expected_workers(self.plan)
        events = read_master_events(layout)
        timeline = worker_timeline(events, expected)
        summaries, invalid, errors = {}, [], worker_errors(events)
        warnings = list(warnings or [])
        for name in expected:
            path = layout.worker(name.rsplit("-w", 1)[0], name).summary
            if path.exists():
                summaries[name] = json.loads(path.read_text())
                invalid += summaries[name].get("invalid_reasons", [])
                warnings += summaries[name].get("warnings", [])
            else:
                code = (worker_exit_codes or {}).get(name)
                invalid.append(f"{name}: could not run the plan: {errors[name]} (worker exited with {code})"
                               if name in errors else
                               f"{name}: no worker summary (worker exited with {code}); its closed chunks are used")
        invalid += shortfalls(summaries)
        plan_sent = next((e for e in events if PLAN_SENT.matches(e)), {})
        started = next((e for e in events if START_SENT.matches(e)), plan_sent)  # the instant the workers used
        invalid += off_start(summaries, started.get("start_ref_ns"))
        if never_started is not None:
            invalid.append(never_started)
        elif master_lost_s is not None:
            planned = sum(s.get("planned", 0) for s in summaries.values())
            sent = sum(s.get("sent", 0) for s in summaries.values())
            invalid.append(f"master lost at +{master_lost_s:.0f} s (Locust master exited with {master_code}); "
                           f"{sent:,} of {planned:,} planned requests sent")
        if interrupted:
            invalid.append("run interrupted (Ctrl-C) before the schedule finished")
        invalid += [f"the run was stopped early: {e}" for e in write_errors or []]
        cpu_now = read_cpu_times()
        host_cpu = cpu_usage(self.cpu_at_start, cpu_now) if self.cpu_at_start and cpu_now else {}
        steal = steal_warning(host_cpu)
        if steal:
            warnings.append(steal)
        return {
            "run_id": self.plan.run_id, "profile_name": p.name, "profile": p.model_dump(mode="json"),
            "plan": self.plan.model_dump(mode="json"),
            "seed": p.load.seed, "overrides": list(p.overrides), "versions": versions(), "host": host_info(),
            "git_sha": git_sha(), "start_ns": self.started_ns, "end_ns": time.time_ns(),
            "start_ref_ns": started.get("start_ref_ns"),
            "servers": self.servers,
            "regions": [r.model_dump(mode="json") | {"address": self.region_addresses.get(r.name)} for r in p.regions],
            "workers": {n: {**timeline.get(n, {}), "summary": summaries.get(n)} for n in expected},
            "host_cpu": host_cpu,
            "valid": not invalid, "invalid_reasons": invalid, "warnings": warnings, "interrupted": interrupted,
            "state": "ended",
        }
