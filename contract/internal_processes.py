"""The processes tailrace starts for itself — the embedded server, the SNTP reference, a region's delay proxy, a
model build — each with its options declared once, here: the starter builds them (from a profile) and the process
reads the same object. They travel as one JSON argument to the process' own module entry point
(`python -m tailrace.endpoints.server '{…}'`), never as a second spelling in command-line flags; the user-facing
commands (`tailrace serve`, `sntp`, `proxy`, `models build`) parse their flags into the same objects."""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tailrace.contract.exit_codes import USAGE


class ListenError(OSError):
    """A server tailrace starts cannot listen where it was told (a port in use, an address not this machine's): the
    address and the system's reason, in one line — the commands exit 2 with it before anything starts."""

    def __init__(self, host: str, port: int, exc: OSError) -> None:
        # the system's words for its errno (asyncio wraps them in a sentence of its own); a name lookup's its own
        reason = os.strerror(exc.errno) if exc.errno and not isinstance(exc, socket.gaierror) else exc.strerror or exc
        super().__init__(f"cannot listen on {host}:{port} ({reason})")


def check_listen(host: str, port: int, udp: bool = False) -> None:
    """Raise ListenError where a TCP server (as it binds: SO_REUSEADDR) or a UDP one (`udp`) could not listen on
    host:port now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM) as sock:
        if not udp:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ListenError(host, port, exc) from None


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AnswerModel(_Options):
    """A generative model's scripted answers to graded items (endpoints/serving/answers.py)."""

    key_file: Path  # JSON: a graded prompt's text → {"kind": number | letter | text, "reference": …}
    answers_file: Path | None = None  # one JSON line per answer decided: {trace_id, batch, p, correct}
    correct: float = Field(0.9, ge=0, le=1)
    fall_per_seq: float = Field(0.0, ge=0, le=1)
    floor: float = Field(0.0, ge=0, le=1)
    answer_after_tokens: int = Field(8, ge=0)
    seed: int = 0


class ServerOptions(_Options):
    """Settings of one embedded server (its models and their scheduling)."""

    repository: Path
    slots: dict[str, int] = Field(default_factory=dict)
    queue_depth: dict[str, int] = Field(default_factory=dict)
    max_body_bytes: int = 8 * 1024 * 1024
    service_time_mean_ms: float | None = None  # synthetic_mm1's mean service time
    fault_injection: bool = False
    models: tuple[str, ...] = ()  # only these of the repository (empty: all)
    max_batch: dict[str, int] = Field(default_factory=dict)
    header_timeout_s: float = 10.0  # a new connection must send a complete request header by then
    idle_timeout_s: float = 30.0  # an idle keep-alive connection is closed after this
    # generative model → BatchingLimits overrides (max_num_seqs, …, enable_prefix_caching 0/1)
    batching: dict[str, dict[str, int]] = Field(default_factory=dict)
    answers: dict[str, AnswerModel] = Field(default_factory=dict)  # generative model → its scripted answers


class EmbeddedServerLaunch(_Options):
    """An embedded server as a run starts it: its options and where it listens (plain, loopback)."""

    options: ServerOptions
    host: str = "127.0.0.1"
    http_port: int = Field(gt=0, lt=65536)
    grpc_port: int | None = Field(None, gt=0, lt=65536)


class SntpOptions(_Options):
    host: str = "127.0.0.1"
    port: int = Field(12300, gt=0, lt=65536)


class ProxyRoute(_Options):
    listen_host: str
    listen_port: int = Field(gt=0, lt=65536)
    target_host: str
    target_port: int = Field(gt=0, lt=65536)

    @classmethod
    def parse(cls, text: str) -> "ProxyRoute":
        """'LHOST:LPORT=THOST:TPORT'."""
        try:
            listen, target = text.split("=")
            lh, lp = listen.rsplit(":", 1)
            th, tp = target.rsplit(":", 1)
            return cls(listen_host=lh, listen_port=int(lp), target_host=th, target_port=int(tp))
        except (ValueError, ValidationError):
            raise ValueError(f"route must be LISTEN_HOST:PORT=TARGET_HOST:PORT, got {text!r}") from None

    def __str__(self) -> str:
        return f"{self.listen_host}:{self.listen_port}->{self.target_host}:{self.target_port}"


class ProxyOptions(_Options):
    """One region's delay proxy: its routes and the one-way delay each direction adds."""

    routes: tuple[ProxyRoute, ...] = Field(min_length=1)
    delay_ms: float = Field(0.0, ge=0)
    jitter_ms: float = Field(0.0, ge=0)
    seed: int = 0


class ModelsBuildOptions(_Options):
    out: Path
    mm1_mean_ms: float = Field(2.0, gt=0)


# each process' entry point: the module run with `python -m`
EMBEDDED_SERVER = "tailrace.endpoints.server"
SNTP_SERVER = "tailrace.harness.services.sntp_server"
DELAY_PROXY = "tailrace.harness.services.delay_proxy"
MODELS_BUILD = "tailrace.endpoints.models.model_build"

Opts = TypeVar("Opts", bound=_Options)


def internal_argv(module: str, options: _Options) -> list[str]:
    """The command line that starts `module`'s process with `options`, with this interpreter."""
    return [sys.executable, "-m", module, options.model_dump_json()]


def options_from_argv(kind: type[Opts], argv: list[str], module: str) -> Opts:
    """The options a process was started with (its one JSON argument); a bad one exits 2 with one line."""
    if len(argv) != 1:
        sys.exit(_usage(module, kind, f"expected one JSON argument, got {len(argv)}"))
    try:
        return kind.model_validate_json(argv[0])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(the whole argument)"
        sys.exit(_usage(module, kind, f"{where}: {first['msg']}"))


def _usage(module: str, kind: type, why: str) -> int:
    print(f"python -m {module}: {why} (its {kind.__name__}, as JSON; started by tailrace itself — the command for "
          "a person is `tailrace --help`)", file=sys.stderr)
    return USAGE
