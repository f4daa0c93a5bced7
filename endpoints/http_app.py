"""KServe v2 HTTP/REST routes (Starlette) over the server core."""
from __future__ import annotations

import asyncio

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from endpoints.errors import InferenceError
from endpoints.kserve_codec import decode_http, encode_http
from endpoints.server_core import EXTENSIONS, SERVER_NAME, SERVER_VERSION, InferenceServer, RequestClock, \
    server_timing_header, timing_parameters
from endpoints.trace_context import parse_traceparent

_JSON = "application/json"


def _json(body: object, status: int = 200, headers: dict | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=_JSON, headers=headers)


def _error(exc: InferenceError) -> Response:
    return _json({"error": exc.message}, exc.http_status)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise InferenceError(f"request body of {declared} bytes exceeds the limit of {limit} bytes", 400)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise InferenceError(f"request body exceeds the limit of {limit} bytes", 400)
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(server: InferenceServer) -> Starlette:
    """The Starlette application serving `server`'s models."""
    requests_http = {name: server.metrics.requests.labels(name, "http") for name in server.specs}

    async def live(_: Request) -> Response:
        return Response(status_code=200)

    async def ready(_: Request) -> Response:
        return Response(status_code=200 if server.ready else 503)

    async def server_metadata(_: Request) -> Response:
        return _json({"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS})

    async def model_metadata(request: Request) -> Response:
        try:
            name = request.path_params["model"]
            server.check_version(name, request.path_params.get("version"))
            return _json(server.model_metadata(name))
        except InferenceError as exc:
            return _error(exc)

    async def model_ready(request: Request) -> Response:
        try:
            name = request.path_params["model"]
            server.spec(name)
            server.check_version(name, request.path_params.get("version"))
            return Response(status_code=200 if server.ready else 503)
        except InferenceError as exc:
            return _error(exc)

    async def model_config(request: Request) -> Response:
        try:
            from endpoints.model_config import config_as_json

            return _json(config_as_json(server.spec(request.path_params["model"])))
        except InferenceError as exc:
            return _error(exc)

    async def statistics(request: Request) -> Response:
        try:
            name = request.path_params.get("model")
            if name:
                server.check_version(name, request.path_params.get("version"))
            return _json(server.statistics(name))
        except InferenceError as exc:
            return _error(exc)

    async def infer(request: Request) -> Response:
        clock = RequestClock.start()
        name = request.path_params["model"]
        ids = parse_traceparent(request.headers.get("traceparent"))
        trace_headers = {"traceparent": request.headers["traceparent"]} if ids else {}
        try:
            spec = server.spec(name)
            server.check_version(name, request.path_params.get("version"))
            requests_http[name].inc()
            body = await _read_body(request, server.options.max_body_bytes)
            decoded = decode_http(spec, body, request.headers.get("inference-header-content-length"))
            job = server.schedulers[name].submit(decoded.inputs)
            outputs = await asyncio.wrap_future(job.future)
            server.record_success(name, decoded.batch_size, clock, job.timings)
            params = timing_parameters(clock, job.timings, ids[0] if ids else None)
            payload, header_len = encode_http(spec, decoded, outputs, params)
        except InferenceError as exc:
            server.record_failure(name, clock, exc)
            return _json({"error": exc.message}, exc.http_status, trace_headers)
        headers = {"server-timing": server_timing_header(params), **trace_headers}
        if header_len is not None:
            headers["inference-header-content-length"] = str(header_len)
            return Response(payload, media_type="application/octet-stream", headers=headers)
        return Response(payload, media_type=_JSON, headers=headers)

    async def metrics(_: Request) -> Response:
        return Response(server.metrics.exposition(), media_type="text/plain; version=0.0.4")

    async def stall(request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
            seconds = float(body["seconds"])
            if not 0 < seconds <= 60:
                raise ValueError("seconds must be in (0, 60]")
            targets = [body["model"]] if body.get("model") else list(server.schedulers)
            for model in targets:
                server.spec(model)
                server.schedulers[model].stall(seconds)
            return _json({"stalled": targets, "seconds": seconds})
        except InferenceError as exc:
            return _error(exc)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return _json({"error": f"stall body must be {{'seconds': s, 'model'?: m}}: {exc}"}, 400)

    routes = [
        Route("/v2/health/live", live),
        Route("/v2/health/ready", ready),
        Route("/v2", server_metadata),
        Route("/v2/models/stats", statistics),
        Route("/v2/models/{model}", model_metadata),
        Route("/v2/models/{model}/versions/{version}", model_metadata),
        Route("/v2/models/{model}/ready", model_ready),
        Route("/v2/models/{model}/versions/{version}/ready", model_ready),
        Route("/v2/models/{model}/config", model_config),
        Route("/v2/models/{model}/stats", statistics),
        Route("/v2/models/{model}/versions/{version}/stats", statistics),
        Route("/v2/models/{model}/infer", infer, methods=["POST"]),
        Route("/v2/models/{model}/versions/{version}/infer", infer, methods=["POST"]),
        Route("/metrics", metrics),
    ]
    if server.options.fault_injection:
        routes.append(Route("/v2/debug/stall", stall, methods=["POST"]))
    return Starlette(routes=routes)
