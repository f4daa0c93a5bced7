"""Shared fixtures: one model repository per test session, real endpoint processes on loopback."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from endpoints.model_build import build_repository
from harness.processes import free_port, start_embedded_endpoint

IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models")
    build_repository(out)
    return out


class Endpoint:
    def __init__(self, proc, host: str, http_port: int, grpc_port: int) -> None:
        self.proc, self.host, self.http_port, self.grpc_port = proc, host, http_port, grpc_port

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def http_addr(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_addr(self) -> str:
        return f"{self.host}:{self.grpc_port}"


def start_endpoint(repo: Path, log_dir: Path, extra: list[str] | None = None, host: str = "127.0.0.1") -> Endpoint:
    http_port, grpc_port = free_port(host), free_port(host)
    proc = start_embedded_endpoint(repo, host, http_port, grpc_port, log_dir / f"endpoint-{http_port}.log", extra)
    return Endpoint(proc, host, http_port, grpc_port)


@pytest.fixture(scope="session")
def endpoint(model_repo, tmp_path_factory):
    ep = start_endpoint(model_repo, tmp_path_factory.mktemp("endpoint-logs"),
                        ["--max-body-bytes", "65536", "--enable-fault-injection"])
    yield ep
    ep.proc.stop()
