"""Who this worker is: per-process settings from environment variables (Locust overwrites a worker's CLI
arguments with the master's, so they cannot travel there). Everything else comes from the run plan."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

REGION = "TAILRACE_REGION"
WORKER_INDEX = "TAILRACE_WORKER_INDEX"
CLOCK_SKEW_MS = "TAILRACE_CLOCK_SKEW_MS"
ENDPOINT_URLS = "TAILRACE_ENDPOINT_URLS"
METRICS_PORT = "TAILRACE_METRICS_PORT"
METRICS_BIND = "TAILRACE_METRICS_BIND"
OUT_DIR = "TAILRACE_OUT_DIR"
MODELS_DIR = "TAILRACE_MODELS_DIR"
SPOOL = "TAILRACE_SPOOL"
TOKEN_ENV = "TAILRACE_RUN_TOKEN"  # the run's token (master and workers); never written to the run directory
MASTER_HOST = "TAILRACE_MASTER_HOST"
MASTER_TIMEOUT = "TAILRACE_MASTER_TIMEOUT_S"  # tailrace worker --master-timeout-s (else the profile's)
PLAN_ENV = "TAILRACE_PLAN"  # the Locust master's: the run plan it reads (plan.json) and sends to its workers


@dataclass(frozen=True)
class WorkerIdentity:
    """A worker's region and index, and what differs on its host: emulated clock skew, endpoint URL
    overrides (how this host reaches an endpoint), its metrics port, local output / model directories, and
    for a worker on another host than its master: its spool (results go to the master from there) and the
    master's host (clock.servers "master" is the master's SNTP answer)."""

    region: str
    index: int = 0
    skew_ms: float = 0.0
    endpoint_urls: dict[str, str] | None = None
    out_dir: str | None = None
    models_dir: str | None = None
    metrics_port: int | None = None  # 0: any free port (a local run's workers: reported in their HELLO)
    metrics_bind: str | None = None  # default 127.0.0.1 (harness/worker/metrics.py)
    spool: str | None = None
    master_host: str | None = None
    master_timeout_s: float | None = None  # None: the profile's generator.master_timeout_s

    @property
    def name(self) -> str:
        return f"{self.region}-w{self.index}"

    def env(self) -> dict[str, str]:
        """The environment variables that carry this identity to a worker process."""
        env = {REGION: self.region, WORKER_INDEX: str(self.index), CLOCK_SKEW_MS: str(self.skew_ms)}
        optional = {ENDPOINT_URLS: json.dumps(self.endpoint_urls) if self.endpoint_urls else None,
                    METRICS_PORT: str(self.metrics_port) if self.metrics_port is not None else None,
                    METRICS_BIND: self.metrics_bind,
                    OUT_DIR: self.out_dir, MODELS_DIR: self.models_dir, SPOOL: self.spool,
                    MASTER_HOST: self.master_host,
                    MASTER_TIMEOUT: str(self.master_timeout_s) if self.master_timeout_s else None}
        return env | {k: v for k, v in optional.items() if v}

    @classmethod
    def from_env(cls, env=os.environ) -> "WorkerIdentity":
        region = env.get(REGION)
        if not region:
            raise RuntimeError(f"{REGION} is not set: every tailrace worker needs its region")
        try:
            return cls(region=region, index=int(env.get(WORKER_INDEX, "0")),
                       skew_ms=float(env.get(CLOCK_SKEW_MS, "0")),
                       endpoint_urls=json.loads(env.get(ENDPOINT_URLS) or "{}") or None,
                       out_dir=env.get(OUT_DIR) or None, models_dir=env.get(MODELS_DIR) or None,
                       metrics_port=int(env[METRICS_PORT]) if env.get(METRICS_PORT) else None,
                       metrics_bind=env.get(METRICS_BIND) or None,
                       spool=env.get(SPOOL) or None, master_host=env.get(MASTER_HOST) or None,
                       master_timeout_s=float(env[MASTER_TIMEOUT]) if env.get(MASTER_TIMEOUT) else None)
        except (ValueError, json.JSONDecodeError) as exc:
            raise RuntimeError(f"bad TAILRACE_* environment: {exc}") from exc
