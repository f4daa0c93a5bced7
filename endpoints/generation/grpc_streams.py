"""ModelStreamInfer for the generative models: Triton's streaming gRPC on a decoupled model, from the same engines
as the HTTP routes. Each request of the stream (text_input, optional max_tokens input; ignore_eos, min_tokens,
max_tokens as parameters) is answered with one response per step that produced tokens (text_output,
num_output_tokens), the last marked `triton_final_response` — or, when the request asks
`triton_enable_empty_final_response` (tritonclient's enable_empty_final_response), an empty final response after
them, as Triton sends it. A refused request is a response with its error_message; the stream goes on."""
from __future__ import annotations

import struct

from tritonclient.grpc import service_pb2

from tailrace.endpoints.generation.hub import StreamHub
from tailrace.endpoints.serving.continuous import Generation
from tailrace.endpoints.serving.core import RequestClock
from tailrace.endpoints.serving.errors import InferenceError

_WAIT_S = 1.0  # a waiting stream looks at its client this often


def _text_input(request) -> str:
    for i, tensor in enumerate(request.inputs):
        if tensor.name != "text_input":
            continue
        if i < len(request.raw_input_contents):
            raw = request.raw_input_contents[i]
            if len(raw) < 4:
                break
            return raw[4:4 + struct.unpack_from("<I", raw)[0]].decode("utf-8", "replace")
        if tensor.contents.bytes_contents:
            return tensor.contents.bytes_contents[0].decode("utf-8", "replace")
    raise InferenceError("text_input: required, one BYTES element")


def _int_input(request, name: str) -> int | None:
    for i, tensor in enumerate(request.inputs):
        if tensor.name == name:
            if i < len(request.raw_input_contents):
                raw = request.raw_input_contents[i]
                return struct.unpack_from("<i" if tensor.datatype == "INT32" else "<q", raw)[0] if raw else None
            values = tensor.contents.int_contents or tensor.contents.int64_contents
            return values[0] if values else None
    return None


def _parameter(request, name: str, default):
    if name not in request.parameters:
        return default
    p = request.parameters[name]
    return getattr(p, p.WhichOneof("parameter_choice"))


def _response(request, model: str, text: str = "", tokens: int = 0, final: bool = False, finish_reason: str = ""):
    response = service_pb2.ModelInferResponse(model_name=model, model_version="1", id=request.id)
    if text or tokens:
        encoded = text.encode()
        response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
        response.raw_output_contents.append(struct.pack("<I", len(encoded)) + encoded)
        response.outputs.add(name="num_output_tokens", datatype="INT32", shape=[1])
        response.raw_output_contents.append(struct.pack("<i", tokens))
    if finish_reason:
        response.parameters["finish_reason"].string_param = finish_reason
    response.parameters["triton_final_response"].bool_param = final
    return service_pb2.ModelStreamInferResponse(infer_response=response)


class GrpcStreams:
    """The ModelStreamInfer handler of the embedded gRPC service (a generator on one of its threads)."""

    def __init__(self, hub: StreamHub) -> None:
        self.hub, self.server = hub, hub.server

    def __call__(self, request_iterator, context):
        for request in request_iterator:
            yield from self._one(request, context)

    def _one(self, request, context):
        clock = RequestClock()
        model = request.model_name
        engine = self.server.generators.get(model)
        try:
            if engine is None:
                self.server.spec(model)  # NOT_FOUND for an unknown model
                raise InferenceError(f"model '{model}' is not decoupled: use ModelInfer")
            max_tokens = _int_input(request, "max_tokens") or _parameter(request, "max_tokens", 16)
            g = Generation(prompt=engine.decoder.vocabulary.encode(_text_input(request)), max_tokens=int(max_tokens),
                           ignore_eos=bool(_parameter(request, "ignore_eos", False)),
                           min_tokens=int(_parameter(request, "min_tokens", 0)), arrival_ns=clock.receive_mono_ns)
            moved = self.hub.follow_on_thread(engine, g)
        except InferenceError as exc:
            yield service_pb2.ModelStreamInferResponse(error_message=exc.message)
            return
        empty_final = bool(_parameter(request, "triton_enable_empty_final_response", False))
        piece = engine.decoder.vocabulary.piece
        try:
            sent = 0
            while True:
                moved.wait(_WAIT_S)
                moved.clear()
                if not context.is_active():
                    return  # the client left: its request leaves the batch at the next step
                count, finished = len(g.tokens), g.done
                if count > sent:
                    yield _response(request, model, "".join(piece(t) for t in g.tokens[sent:count]), count - sent,
                                    final=finished and not empty_final,
                                    finish_reason=g.finish_reason if finished else "")
                    sent = count
                if finished:
                    break
            if empty_final:
                yield _response(request, model, final=True)
        finally:
            self.hub.release(engine, g)

