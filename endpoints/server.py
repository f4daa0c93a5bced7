"""Run the embedded endpoint: KServe v2 over HTTP (uvicorn) and gRPC (grpcio) in one process."""
from __future__ import annotations

import logging
import sys

import uvicorn

from endpoints.grpc_service import start_grpc_server
from endpoints.http_app import build_app
from endpoints.http_guard import guarded_protocol
from endpoints.server_core import InferenceServer, ServerOptions


def serve(options: ServerOptions, host: str, http_port: int, grpc_port: int | None) -> int:
    """Serve until SIGINT/SIGTERM; returns the process exit code."""
    server = InferenceServer(options)
    grpc_server = start_grpc_server(server, host, grpc_port) if grpc_port else None
    config = uvicorn.Config(build_app(server), host=host, port=http_port, loop="uvloop",
                            http=guarded_protocol(options.header_timeout_s), interface="asgi3", access_log=False,
                            log_level="warning", lifespan="off", backlog=4096,
                            timeout_keep_alive=options.idle_timeout_s, proxy_headers=False, server_header=False)
    http_server = uvicorn.Server(config)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    models = ", ".join(f"{n}(slots={s.slots}, queue={s.queue_depth})" for n, s in server.schedulers.items())
    print(f"tailrace serve: http://{host}:{http_port}" + (f" grpc {host}:{grpc_port}" if grpc_port else "")
          + f" models: {models}", flush=True)
    try:
        http_server.run()
    finally:
        server.stop()
        if grpc_server is not None:
            grpc_server.stop(grace=1).wait(2)
    return 0 if http_server.started else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: tailrace serve --models DIR")
