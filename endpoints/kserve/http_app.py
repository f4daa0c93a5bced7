"""KServe v2 HTTP/REST routes over the server core.

The infer route is a plain ASGI handler (it is the hot path: no per-request Request/Response objects);
every other route goes through Starlette.
"""
from __future__ import annotations

import re

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tailrace.contract.trace_context import parse_traceparent
from tailrace.endpoints.kserve.codec import decode_http, encode_http
from tailrace.endpoints.kserve.pipeline import InferCall
from tailrace.endpoints.serving.core import (
    EXTENSIONS,
    SERVER_NAME,
    SERVER_VERSION,
    InferenceServer,
    RequestClock,
    server_timing_value,
)
from tailrace.endpoints.serving.errors import InferenceError

_JSON = "application/json"
_JSON_BYTES, _BINARY = b"application/json", b"application/octet-stream"
_INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")


def _json(body: object, status: int = 200, headers: dict | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=_JSON, headers=headers)


def _error(exc: InferenceError) -> Response:
    return _json({"error": exc.message}, exc.http_status)


class InferRoute:
    """POST /v2/models/{m}[/versions/{v}]/infer as a raw ASGI handler (the hot path: one pass over the
    headers, no per-request Request/Response objects)."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server

    @staticmethod
    async def _read_body(receive, declared: bytes | None, call: InferCall) -> bytes | None:
        """The request body, refused past the server's limit (`InferCall.bound`) as soon as its declared or
        received size says so; None when the client went away."""
        if declared is not None and declared.isdigit():
            call.bound(int(declared), "request body")
        message = await receive()
        chunk = message.get("body", b"")
        if not message.get("more_body", False) and message["type"] == "http.request":
            call.bound(len(chunk), "request body")
            return chunk  # the whole body in one message: the usual case
        chunks, size = [], 0
        while True:
            if message["type"] == "http.disconnect":
                return None
            size += len(chunk)
            call.bound(size, "request body")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
            message = await receive()
            chunk = message.get("body", b"")

    async def __call__(self, scope, receive, send, name: str, version: str | None) -> None:
        clock = RequestClock()
        traceparent = declared = header_len = None
        for key, value in scope["headers"]:
            if key == b"content-length":
                declared = value
            elif key == b"traceparent":
                traceparent = value
            elif key == b"inference-header-content-length":
                header_len = value
        ids = parse_traceparent(traceparent.decode("latin-1")) if traceparent else None
        if scope["method"] != "POST":
            await _send(send, 405, b'{"error":"infer takes POST"}', _echo(traceparent, ids))
            return
        call = InferCall(self.server, name, "http", clock, ids[0] if ids else None)
        try:
            call.admit(version)
            body = await self._read_body(receive, declared, call)
            if body is None:
                return
            decoded = call.decode(lambda spec: decode_http(spec, body, header_len.decode("latin-1")
                                                           if header_len is not None else None))
            outputs = await call.run_async()
            params = call.parameters()
            payload, json_len = encode_http(call.spec, decoded, outputs, params)
        except InferenceError as exc:
            call.failed(exc)
            await _send(send, exc.http_status, orjson.dumps({"error": exc.message}), _echo(traceparent, ids))
            return
        headers = [(b"content-type", _JSON_BYTES if json_len is None else _BINARY),
                   (b"content-length", b"%d" % len(payload)), (b"server-timing", server_timing_value(params))]
        if ids:
            headers.append((b"traceparent", traceparent))
        if json_len is not None:
            headers.append((b"inference-header-content-length", b"%d" % json_len))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def _echo(traceparent: bytes | None, ids) -> list:
    """The traceparent header to echo: only a valid one."""
    return [(b"traceparent", traceparent)] if ids else []


async def _send(send, status: int, payload: bytes, headers: list, content_type: bytes = b"application/json") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(payload)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": payload})


class KServeRoutes:
    """KServe v2's health, metadata, configuration and statistics routes of one server, its Prometheus metrics, and
    (with fault injection) the stall of tests and demos; inference is `InferRoute`'s."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server

    async def live(self, _: Request) -> Response:
        return Response(status_code=200)

    async def ready(self, _: Request) -> Response:
        return Response(status_code=200 if self.server.ready else 503)

    async def server_metadata(self, _: Request) -> Response:
        return _json({"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS})

    async def model_metadata(self, request: Request) -> Response:
        try:
            name = request.path_params["model"]
            self.server.check_version(name, request.path_params.get("version"))
            return _json(self.server.model_metadata(name))
        except InferenceError as exc:
            return _error(exc)

    async def model_ready(self, request: Request) -> Response:
        try:
            name = request.path_params["model"]
            self.server.spec(name)
            self.server.check_version(name, request.path_params.get("version"))
            return Response(status_code=200 if self.server.ready else 503)
        except InferenceError as exc:
            return _error(exc)

    async def model_config(self, request: Request) -> Response:
        try:
            from tailrace.endpoints.models.model_config import config_as_json

            return _json(config_as_json(self.server.spec(request.path_params["model"])))
        except InferenceError as exc:
            return _error(exc)

    async def statistics(self, request: Request) -> Response:
        try:
            name = request.path_params.get("model")
            if name:
                self.server.check_version(name, request.path_params.get("version"))
            return _json(self.server.statistics(name))
        except InferenceError as exc:
            return _error(exc)

    async def metrics(self, _: Request) -> Response:
        return Response(self.server.metrics.exposition(), media_type="text/plain; version=0.0.4")

    async def stall(self, request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
            seconds = float(body["seconds"])
            if not 0 < seconds <= 60:
                raise ValueError("seconds must be in (0, 60]")
            targets = [body["model"]] if body.get("model") else [*self.server.schedulers, *self.server.generators]
            for model in targets:
                self.server.spec(model)
                (self.server.schedulers.get(model) or self.server.generators[model]).stall(seconds)
            return _json({"stalled": targets, "seconds": seconds})
        except InferenceError as exc:
            return _error(exc)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return _json({"error": f"stall body must be {{'seconds': s, 'model'?: m}}: {exc}"}, 400)

    def routes(self) -> list[Route]:
        """Every route but inference (build_app routes that itself, before Starlette)."""
        routes = [
            Route("/v2/health/live", self.live),
            Route("/health", self.live),  # vLLM's liveness route (clients such as guidellm ask it first)
            Route("/v2/health/ready", self.ready),
            Route("/v2", self.server_metadata),
            Route("/v2/models/stats", self.statistics),
            Route("/v2/models/{model}", self.model_metadata),
            Route("/v2/models/{model}/versions/{version}", self.model_metadata),
            Route("/v2/models/{model}/ready", self.model_ready),
            Route("/v2/models/{model}/versions/{version}/ready", self.model_ready),
            Route("/v2/models/{model}/config", self.model_config),
            Route("/v2/models/{model}/stats", self.statistics),
            Route("/v2/models/{model}/versions/{version}/stats", self.statistics),
            Route("/metrics", self.metrics),
        ]
        if self.server.options.fault_injection:
            routes.append(Route("/v2/debug/stall", self.stall, methods=["POST"]))
        return routes


def build_app(server: InferenceServer):
    """The ASGI 3 application serving `server`'s models (not a coroutine function: pass interface="asgi3")."""
    starlette_app = Starlette(routes=KServeRoutes(server).routes())
    infer = InferRoute(server)

    infer_paths: dict[str, tuple[str, str | None]] = {}  # path → (model, version), for the models served

    def app(scope, receive, send):
        """ASGI 3: returns the handler's coroutine (one frame less on every resume of the hot path)."""
        if scope["type"] == "http":
            path = scope["path"]
            target = infer_paths.get(path)
            if target is None and path.endswith("/infer"):
                match = _INFER_PATH.match(path)
                if match:
                    target = (match.group(1), match.group(2))
                    if target[0] in server.specs and len(infer_paths) < 4096:
                        infer_paths[path] = target
            if target is not None:
                return infer(scope, receive, send, *target)
        return starlette_app(scope, receive, send)

    return app
