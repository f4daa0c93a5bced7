"""The run manifest: resolved profile, seed, versions, host, git sha, start/end, workers, validity."""
from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

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
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo or Path(__file__).resolve().parent.parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def read_master_events(run_dir: Path) -> list[dict]:
    path = run_dir / "master-events.jsonl"
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line from a killed master
    return events


def worker_timeline(events: list[dict], expected: list[str]) -> dict[str, dict]:
    """Per worker: when it joined, said hello, finished or left (epoch ns, master clock)."""
    by_client: dict[str, str] = {}
    joined: dict[str, int] = {}
    out: dict[str, dict] = {w: {"joined_ns": None, "done_ns": None, "left_ns": None, "left_reason": None}
                            for w in expected}
    for e in events:
        cid = e.get("client_id")
        if e["event"] == "worker_joined":
            joined[cid] = e["t_ns"]
        elif e["event"] == "worker_hello":
            by_client[cid] = e["worker"]
            out.setdefault(e["worker"], {"joined_ns": None, "done_ns": None, "left_ns": None, "left_reason": None})
            out[e["worker"]]["joined_ns"] = joined.get(cid, e["t_ns"])
        elif e["event"] == "worker_done":
            name = by_client.get(cid) or e.get("summary", {}).get("worker")
            if name:
                out.setdefault(name, {})["done_ns"] = e["t_ns"]
        elif e["event"] == "worker_left":
            name = by_client.get(cid) or e.get("worker")
            if name and out.get(name, {}).get("left_ns") is None:
                out.setdefault(name, {})["left_ns"] = e["t_ns"]
                out[name]["left_reason"] = e.get("reason")
    return out


def write_manifest(run_dir: Path, manifest: dict) -> None:
    tmp = run_dir / ".manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    os.replace(tmp, run_dir / "manifest.json")
