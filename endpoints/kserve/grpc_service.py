"""KServe v2 `GRPCInferenceService` over the server core (sync grpcio, thread pool); ModelStreamInfer is handed to
the generative front end (endpoints/generation/grpc_streams.py) by the server that composes them."""
from __future__ import annotations

from concurrent import futures

import grpc
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from tailrace.contract.trace_context import parse_traceparent
from tailrace.endpoints.kserve.codec import decode_grpc, encode_grpc
from tailrace.endpoints.kserve.pipeline import InferCall
from tailrace.endpoints.serving.core import (
    EXTENSIONS,
    SERVER_NAME,
    SERVER_VERSION,
    InferenceServer,
    RequestClock,
    server_timing_header,
)
from tailrace.endpoints.serving.errors import InferenceError


def _abort(context: grpc.ServicerContext, exc: InferenceError):
    context.abort(exc.grpc_code, exc.message)


class InferenceService(service_pb2_grpc.GRPCInferenceServiceServicer):
    """The subset of Triton's gRPC service that clients of a KServe v2 endpoint use."""

    def __init__(self, server: InferenceServer, stream_infer=None) -> None:
        self.server = server
        self.stream_infer = stream_infer  # ModelStreamInfer's handler (the generative models'), or None

    def ServerLive(self, request, context):
        return service_pb2.ServerLiveResponse(live=True)

    def ServerReady(self, request, context):
        return service_pb2.ServerReadyResponse(ready=self.server.ready)

    def ServerMetadata(self, request, context):
        return service_pb2.ServerMetadataResponse(name=SERVER_NAME, version=SERVER_VERSION, extensions=EXTENSIONS)

    def ModelReady(self, request, context):
        try:
            self.server.spec(request.name)
            self.server.check_version(request.name, request.version)
        except InferenceError as exc:
            _abort(context, exc)
        return service_pb2.ModelReadyResponse(ready=self.server.ready)

    def ModelMetadata(self, request, context):
        try:
            self.server.check_version(request.name, request.version)
            meta = self.server.model_metadata(request.name)
        except InferenceError as exc:
            _abort(context, exc)
        response = service_pb2.ModelMetadataResponse(name=meta["name"], versions=meta["versions"],
                                                     platform=meta["platform"])
        for src, dst in ((meta["inputs"], response.inputs), (meta["outputs"], response.outputs)):
            for t in src:
                dst.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        return response

    def ModelConfig(self, request, context):
        from tailrace.endpoints.models.model_config import config_as_json

        try:
            body = config_as_json(self.server.spec(request.name))
        except InferenceError as exc:
            _abort(context, exc)
        return service_pb2.ModelConfigResponse(config=json_format.ParseDict(body, model_config_pb2.ModelConfig()))

    def ModelStatistics(self, request, context):
        try:
            if request.name:
                self.server.check_version(request.name, request.version)
            body = self.server.statistics(request.name or None)
        except InferenceError as exc:
            _abort(context, exc)
        return json_format.ParseDict(body, service_pb2.ModelStatisticsResponse())

    def ModelInfer(self, request, context):
        clock = RequestClock.start()
        name = request.model_name
        metadata = dict(context.invocation_metadata())
        ids = parse_traceparent(metadata.get("traceparent"))
        if ids:
            context.send_initial_metadata((("traceparent", metadata["traceparent"]),))
        call = InferCall(self.server, name, "grpc", clock, ids[0] if ids else None)
        try:
            call.admit(request.model_version)
            call.bound(sum(len(r) for r in request.raw_input_contents), "request tensors")
            decoded = call.decode(lambda spec: decode_grpc(spec, request))
            outputs = call.run_blocking()
        except InferenceError as exc:
            call.failed(exc)
            _abort(context, exc)
        params = call.parameters()
        response = encode_grpc(call.spec, decoded, outputs, params)
        context.set_trailing_metadata((("server-timing", server_timing_header(params)),))
        return response


    def ModelStreamInfer(self, request_iterator, context):
        if self.stream_infer is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "this server has no decoupled (generative) model to stream")
        yield from self.stream_infer(request_iterator, context)


def start_grpc_server(server: InferenceServer, host: str, port: int, credentials=None, interceptors=(),
                      max_workers: int = 64, stream_infer=None) -> grpc.Server:
    """Start the gRPC server on host:port (TLS with `credentials`, grpc.ServerCredentials); returns it running."""
    limit = server.options.max_body_bytes
    grpc_server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"), interceptors=list(interceptors),
        options=[("grpc.max_receive_message_length", 2 * limit + 65536),
                 ("grpc.max_send_message_length", 64 * 1024 * 1024), ("grpc.so_reuseport", 0)])
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceService(server, stream_infer), grpc_server)
    bound = (grpc_server.add_secure_port(f"{host}:{port}", credentials) if credentials is not None
             else grpc_server.add_insecure_port(f"{host}:{port}"))
    if bound == 0:
        raise OSError(f"cannot bind gRPC to {host}:{port}")
    grpc_server.start()
    return grpc_server
