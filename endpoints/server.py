"""Run the embedded endpoint: KServe v2 over HTTP (uvicorn) and gRPC (grpcio) in one process, plain or over TLS
(one-way, or mutual with a client CA) on both; the generative models' OpenAI-compatible routes under /v1/."""
from __future__ import annotations

import logging
import ssl
import sys
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from tailrace.contract.credentials import Credential
from tailrace.contract.exit_codes import USAGE
from tailrace.contract.internal_processes import (
    EMBEDDED_SERVER,
    EmbeddedServerLaunch,
    ServerOptions,
    check_listen,
    options_from_argv,
)
from tailrace.endpoints.auth import CredentialInterceptor, require_credential
from tailrace.endpoints.generation.grpc_streams import GrpcStreams
from tailrace.endpoints.generation.hub import StreamHub
from tailrace.endpoints.generation.routes import OpenAIRoutes
from tailrace.endpoints.generation.triton_generate import GenerateRoutes
from tailrace.endpoints.http_guard import guarded_protocol
from tailrace.endpoints.kserve.grpc_service import start_grpc_server
from tailrace.endpoints.kserve.http_app import build_app
from tailrace.endpoints.serving.core import InferenceServer


@dataclass(frozen=True)
class ServerTls:
    """The server's certificate and key (PEM) and, for mutual TLS, the CA that client certificates must chain to."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def check(self) -> None:
        """ValueError naming the flag when a file cannot be read or the pair does not load."""
        for flag, path in (("--tls-cert", self.cert), ("--tls-key", self.key), ("--tls-client-ca", self.client_ca)):
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{flag} {path}: no such file")
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(self.cert, self.key)
            if self.client_ca is not None:
                ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_verify_locations(self.client_ca)
        except ssl.SSLError as exc:
            raise ValueError(f"--tls-cert {self.cert} / --tls-key {self.key} / --tls-client-ca: {exc.reason or exc}"
                             ) from None

    def uvicorn_options(self) -> dict:
        return {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key),
                **({"ssl_ca_certs": str(self.client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED} if self.client_ca else {})}

    def grpc_credentials(self):
        import grpc

        return grpc.ssl_server_credentials(
            [(Path(self.key).read_bytes(), Path(self.cert).read_bytes())],
            root_certificates=Path(self.client_ca).read_bytes() if self.client_ca else None,
            require_client_auth=self.client_ca is not None)


UNVERSIONED = ("/rerank", "/v2/rerank", "/score")  # vLLM's pooling routes outside /v1/


def with_generation_routes(kserve_app, hub: StreamHub | None):
    """The KServe v2 application, with the generative models' routes in front when there are any: /v1/… (the
    OpenAI-compatible ones, and vLLM's unversioned /rerank, /score and /v2/rerank) and /v2/models/{m}/generate[_stream]
    (Triton's generate extension)."""
    if hub is None:
        return kserve_app
    openai, generate = OpenAIRoutes(hub), GenerateRoutes(hub)

    def app(scope, receive, send):
        if scope["type"] == "http":
            path = scope["path"]
            if path.startswith("/v1/") or path.rstrip("/") in UNVERSIONED:
                return openai(scope, receive, send)
            if path.endswith(("/generate", "/generate_stream")):
                target = generate.target(path)
                if target is not None:
                    return generate(scope, receive, send, *target)
        return kserve_app(scope, receive, send)

    return app


def serve(options: ServerOptions, host: str, http_port: int, grpc_port: int | None,
          tls: ServerTls | None = None, credential: Credential | None = None) -> int:
    """Serve until SIGINT/SIGTERM; returns the process exit code. `credential`: every request must carry it
    (endpoints/auth.py)."""
    if tls is not None:
        tls.check()
    if credential is not None:
        credential.value()  # CredentialError (a ValueError naming the file) before anything is bound
    for port in (http_port, grpc_port):  # a port in use is one line (ListenError), before any engine starts
        if port:
            check_listen(host, port)
    server = InferenceServer(options)
    interceptors = [CredentialInterceptor(credential)] if credential else []
    hub = StreamHub(server) if server.generators else None  # starts the generative engines
    grpc_server = start_grpc_server(server, host, grpc_port, tls.grpc_credentials() if tls else None,
                                    interceptors, stream_infer=GrpcStreams(hub) if hub else None) if grpc_port else None
    app = with_generation_routes(build_app(server), hub)
    config = uvicorn.Config(require_credential(app, credential) if credential else app, host=host, port=http_port,
                            loop="uvloop",
                            http=guarded_protocol(options.header_timeout_s), interface="asgi3", access_log=False,
                            log_level="warning", lifespan="off", backlog=4096,
                            timeout_keep_alive=options.idle_timeout_s, proxy_headers=False, server_header=False,
                            **(tls.uvicorn_options() if tls else {}))
    http_server = uvicorn.Server(config)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    models = ", ".join([f"{n}(slots={s.slots}, queue={s.queue_depth})" for n, s in server.schedulers.items()]
                       + [f"{n}(generative: /v1, max_num_seqs={e.limits.max_num_seqs}, max_waiting="
                          f"{e.limits.max_waiting}, max_model_len={e.limits.max_model_len}, prefix caching "
                          + (f"on, {e.limits.kv_cache_tokens} tokens" if e.prefix_cache is not None else
                             "off" if not e.limits.enable_prefix_caching else "not supported by its decoder") + ")"
                          for n, e in server.generators.items()])
    mutual = (" (mutual TLS)" if tls and tls.client_ca else "") + (f" (requires {credential.header})" if credential
                                                                   else "")
    print(f"tailrace serve: http{'s' if tls else ''}://{host}:{http_port}"
          + (f" grpc{'s' if tls else ''}://{host}:{grpc_port}" if grpc_port else "") + mutual
          + f" models: {models}", flush=True)
    try:
        http_server.run()
    finally:
        server.stop()
        if grpc_server is not None:
            grpc_server.stop(grace=1).wait(2)
    return 0 if http_server.started else 1


def main(argv: list[str]) -> int:
    """The embedded server as a run starts it: `python -m tailrace.endpoints.server LAUNCH_JSON`."""
    launch = options_from_argv(EmbeddedServerLaunch, argv, EMBEDDED_SERVER)
    try:
        return serve(launch.options, launch.host, launch.http_port, launch.grpc_port)
    except (ValueError, OSError) as exc:
        print(f"tailrace embedded server: {exc}", file=sys.stderr)
        return USAGE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
