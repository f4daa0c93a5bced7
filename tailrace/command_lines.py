"""The command lines of a distributed run's two roles, built in one place: the multi-host test
(tests/integration/harness/orchestration/test_separate_hosts.py) runs exactly these and the Kubernetes manifests
render exactly these (tailrace/kubernetes.py) — one image, the role is the command. The run token never appears
here: both roles read $TAILRACE_RUN_TOKEN or a --token-file."""
from __future__ import annotations

import sys
from collections.abc import Sequence

from tailrace.harness.services.processes import is_loopback

MASTER_PORT = 5557
SNTP_PORT = 12300


def tailrace_argv(*args: str) -> list[str]:
    """argv that runs the tailrace CLI with this interpreter (`tailrace_argv(*master_args(…))`)."""
    return [sys.executable, "-m", "tailrace.cli", *args]


def master_args(profile: str, *, bind: str, port: int = MASTER_PORT, sntp_port: int = SNTP_PORT, out: str,
                wait_s: float = 600.0, token_file: str | None = None, quiet: bool = False,
                overrides: Sequence[str] = (), ui_bind: str | None = None) -> list[str]:
    """`tailrace master …` arguments (after the program name): binds `bind` (exposed when not loopback); the
    profile's `overrides` as --set (the workers get the resolved plan from the master); the live page on `ui_bind`
    (HOST:PORT; None: the default, loopback)."""
    args = ["master", profile, "--bind", bind]
    if not is_loopback(bind):
        args.append("--expose")
    args += ["--port", str(port), "--sntp-port", str(sntp_port), "--out", out, "--wait-s", f"{wait_s:g}"]
    if token_file:
        args += ["--token-file", token_file]
    for override in overrides:
        args += ["--set", override]
    if ui_bind:
        args += ["--ui-bind", ui_bind]
    return args + (["--quiet"] if quiet else [])


def worker_args(*, master: str, region: str, spool: str, index: str | int = 0, token_file: str | None = None,
                endpoint_urls: dict[str, str] | None = None, metrics_port: int | None = None,
                master_timeout_s: float | None = None) -> list[str]:
    """`tailrace worker …` arguments: `master` is HOST:PORT; `index` may be a placeholder the platform fills
    (Kubernetes' $(TAILRACE_WORKER_INDEX))."""
    args = ["worker", "--master", master, "--region", region, "--index", str(index), "--spool", spool]
    if token_file:
        args += ["--token-file", token_file]
    for name, url in (endpoint_urls or {}).items():
        args += ["--endpoint-url", f"{name}={url}"]
    if metrics_port is not None:
        args += ["--metrics-port", str(metrics_port)]
    if master_timeout_s is not None:
        args += ["--master-timeout-s", f"{master_timeout_s:g}"]
    return args
