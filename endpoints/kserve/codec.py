"""KServe v2 (Open Inference Protocol) tensor codec with validation against a model's spec.

HTTP: JSON tensors and the binary tensor data extension (`Inference-Header-Content-Length`).
gRPC: typed `contents` and `raw_input_contents`. Every refusal is an InferenceError naming the tensor
and what is wrong with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import orjson

from tailrace.contract.tensors import datatype_of, from_json_data, from_raw, to_json_data, to_raw
from tailrace.endpoints.models.model_config import ModelSpec
from tailrace.endpoints.serving.errors import InferenceError

# gRPC InferTensorContents field per datatype.
GRPC_CONTENTS_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}


@dataclass
class DecodedRequest:
    """A validated inference request."""

    inputs: dict[str, np.ndarray]
    request_id: str = ""
    requested_outputs: list[str] = field(default_factory=list)
    binary_outputs: set[str] | frozenset[str] = field(default_factory=set)
    batch_size: int = 1


_NO_BINARY = memoryview(b"")
_NO_OUTPUTS: frozenset[str] = frozenset()


def _bad(message: str) -> InferenceError:
    return InferenceError(message)


def check_shape(spec: ModelSpec, name: object, datatype: object, shape: object) -> tuple[str, tuple[int, ...]]:
    """Validate an input's name, datatype and shape against the model; return (datatype, shape)."""
    tensor = spec.input(name) if type(name) is str else None
    if tensor is None:
        known = ", ".join(t.name for t in spec.inputs)
        raise _bad(f"model '{spec.name}' has no input {name!r} (inputs: {known})")
    if datatype != tensor.datatype:
        raise _bad(f"input '{name}': datatype {datatype!r} does not match the model's {tensor.datatype}")
    if type(shape) not in (list, tuple) or not all(type(d) is int for d in shape):  # bool is not an int here
        raise _bad(f"input '{name}': shape must be a list of integers, got {shape!r}")
    want_shape = tensor.shape
    if len(shape) != len(want_shape):
        raise _bad(f"input '{name}': shape {list(shape)} has rank {len(shape)}, the model expects "
                   f"rank {len(want_shape)} {list(want_shape)}")
    for axis, (got, want) in enumerate(zip(shape, want_shape)):
        if got < 0:
            raise _bad(f"input '{name}': shape {list(shape)} has {got} in dimension {axis}: a request must give "
                       f"concrete sizes (-1 in the model's {list(want_shape)} means any size)")
        if want >= 0 and got != want:
            raise _bad(f"input '{name}': shape {list(shape)} does not match the model's {list(want_shape)}")
    if shape and shape[0] == 0:
        raise _bad(f"input '{name}': batch dimension must be at least 1")
    return datatype, tuple(shape)


def _array_from_json_data(name: str, datatype: str, shape: tuple[int, ...], data: object) -> np.ndarray:
    try:
        return from_json_data(name, datatype, shape, data)
    except ValueError as exc:
        raise _bad(str(exc).replace("tensor ", "input ", 1)) from None


def _array_from_bytes(name: str, datatype: str, shape: tuple[int, ...], raw: bytes) -> np.ndarray:
    try:
        return from_raw(name, datatype, shape, raw)
    except ValueError as exc:
        raise _bad(str(exc).replace("tensor ", "input ", 1)) from None


def _check_complete(spec: ModelSpec, inputs: dict[str, np.ndarray]) -> int:
    if len(inputs) != len(spec.inputs):
        missing = [t.name for t in spec.inputs if t.name not in inputs]
        raise _bad(f"model '{spec.name}': missing input(s) {', '.join(missing)}")
    first = next(iter(inputs.values()))
    return int(first.shape[0]) if first.ndim else 1


def _check_outputs(spec: ModelSpec, names: list[str]) -> None:
    known = {o.name for o in spec.outputs}
    for n in names:
        if n not in known:
            raise _bad(f"model '{spec.name}' has no output {n!r} (outputs: {', '.join(sorted(known))})")


def decode_http(spec: ModelSpec, body: bytes, header_length: str | None) -> DecodedRequest:
    """Parse an HTTP infer body (JSON, or JSON header + binary tensors) into validated arrays."""
    if header_length is not None:
        try:
            json_len = int(header_length)
        except ValueError:
            raise _bad(f"Inference-Header-Content-Length {header_length!r} is not an integer") from None
        if not 0 < json_len <= len(body):
            raise _bad(f"Inference-Header-Content-Length {json_len} is outside the body of {len(body)} bytes")
        header_bytes, binary = body[:json_len], memoryview(body)[json_len:]
    else:
        header_bytes, binary = body, _NO_BINARY
    try:
        request = orjson.loads(header_bytes)
    except orjson.JSONDecodeError as exc:
        raise _bad(f"request body is not valid JSON: {exc}") from None
    if not isinstance(request, dict):
        raise _bad("request body must be a JSON object with an 'inputs' list")
    raw_inputs = request.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise _bad("request must have a non-empty 'inputs' list")
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for i, item in enumerate(raw_inputs):
        if not isinstance(item, dict):
            raise _bad(f"inputs[{i}] must be an object with name, shape, datatype and data")
        name = item.get("name")
        datatype, shape = check_shape(spec, name, item.get("datatype"), item.get("shape"))
        if name in inputs:
            raise _bad(f"input '{name}' is given twice")
        params = item.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise _bad(f"input '{name}': 'parameters' must be an object")
        size = params.get("binary_data_size") if params else None
        if size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(binary):
                raise _bad(f"input '{name}': binary_data_size {size!r} runs past the {len(binary)} binary bytes")
            inputs[name] = _array_from_bytes(name, datatype, shape, bytes(binary[offset:offset + size]))
            offset += size
        elif "data" in item:
            inputs[name] = _array_from_json_data(name, datatype, shape, item["data"])
        else:
            raise _bad(f"input '{name}': neither 'data' nor parameters.binary_data_size given")
    if offset != len(binary):
        raise _bad(f"{len(binary) - offset} trailing binary bytes not claimed by any input")
    batch = _check_complete(spec, inputs)

    req_params = request.get("parameters")
    if req_params is not None and not isinstance(req_params, dict):
        raise _bad("request 'parameters' must be an object")
    binary_default = bool(req_params.get("binary_data_output", False)) if req_params else False
    outputs_field = request.get("outputs")
    if outputs_field is None:
        requested = spec.output_names
        binary_outputs = set(requested) if binary_default else _NO_OUTPUTS
    else:
        if not isinstance(outputs_field, list) or not all(isinstance(o, dict) and isinstance(o.get("name"), str)
                                                         for o in outputs_field):
            raise _bad("'outputs' must be a list of objects with a 'name'")
        requested = [o["name"] for o in outputs_field]
        _check_outputs(spec, requested)
        binary_outputs = {o["name"] for o in outputs_field
                          if (o.get("parameters") or {}).get("binary_data", binary_default)}
    request_id = request.get("id", "")
    return DecodedRequest(inputs, str(request_id) if request_id is not None else "", requested, binary_outputs, batch)


def encode_http(spec: ModelSpec, decoded: DecodedRequest, outputs: dict[str, np.ndarray],
                parameters: dict) -> tuple[bytes, int | None]:
    """The HTTP response body and, when any output is binary, the JSON header length."""
    out_entries = []
    blobs = []
    for name in decoded.requested_outputs:
        arr = outputs[name]
        datatype = datatype_of(arr)
        entry = {"name": name, "datatype": datatype, "shape": arr.shape}
        if name in decoded.binary_outputs:
            raw = to_raw(arr, datatype)
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        elif datatype in ("BYTES", "FP16", "BF16"):
            entry["data"] = to_json_data(arr, datatype)
        else:
            entry["data"] = arr.ravel()  # flat, row-major; orjson writes numpy arrays natively
        out_entries.append(entry)
    response = {"model_name": spec.name, "model_version": "1", "outputs": out_entries, "parameters": parameters}
    if decoded.request_id:
        response["id"] = decoded.request_id
    header = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
    if blobs:
        return header + b"".join(blobs), len(header)
    return header, None


def decode_grpc(spec: ModelSpec, request) -> DecodedRequest:
    """Validate a gRPC ModelInferRequest into arrays (raw_input_contents or typed contents)."""
    if not request.inputs:
        raise _bad("request must have at least one input")
    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise _bad(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs")
    inputs: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(request.inputs):
        datatype, shape = check_shape(spec, tensor.name, tensor.datatype, list(tensor.shape))
        if tensor.name in inputs:
            raise _bad(f"input '{tensor.name}' is given twice")
        if raw:
            inputs[tensor.name] = _array_from_bytes(tensor.name, datatype, shape, raw[i])
        else:
            field_name = GRPC_CONTENTS_FIELD.get(datatype)
            if field_name is None:
                raise _bad(f"input '{tensor.name}': datatype {datatype} needs raw_input_contents")
            values = list(getattr(tensor.contents, field_name))
            if datatype == "BYTES":
                values = [v.decode("latin-1") for v in values]  # from_json_data takes strings; latin-1 keeps bytes
            inputs[tensor.name] = _array_from_json_data(tensor.name, datatype, shape, values)
    batch = _check_complete(spec, inputs)
    requested = [o.name for o in request.outputs] or [o.name for o in spec.outputs]
    _check_outputs(spec, requested)
    return DecodedRequest(inputs, request.id, requested, set(requested), batch)


def encode_grpc(spec: ModelSpec, decoded: DecodedRequest, outputs: dict[str, np.ndarray], parameters: dict):
    """The gRPC ModelInferResponse: the requested outputs as raw contents, the timing parameters typed."""
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse(model_name=spec.name, model_version="1", id=decoded.request_id)
    for name in decoded.requested_outputs:
        arr = outputs[name]
        datatype = datatype_of(arr)
        response.outputs.add(name=name, datatype=datatype, shape=list(arr.shape))
        response.raw_output_contents.append(to_raw(arr, datatype))
    for key, value in parameters.items():
        if isinstance(value, int):
            response.parameters[key].int64_param = value
        else:
            response.parameters[key].string_param = str(value)
    return response
