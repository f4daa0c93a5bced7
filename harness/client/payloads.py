"""Requests encoded before the run, and answers decoded and checked after it.

`Payloads` holds one endpoint's requests, one per batch start (every `stride`-th sample): HTTP bodies (JSON,
or the binary tensor extension for large and BYTES tensors) or gRPC `ModelInferRequest`s. Sending then does no
tensor encoding. `decode_http_outputs` / `decode_grpc_outputs` read only the outputs a check needs.
`AnswerCheck` counts the rows of a request whose answer is right (labels or validation_data).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

from tailrace.contract.profile import Check
from tailrace.contract.requests import RequestSpec
from tailrace.contract.tensors import from_json_data, from_raw, to_json_data, to_raw
from tailrace.harness.client.request_data import SampleSet

BINARY_AUTO_BYTES = 1024  # binary = "auto": tensors over 1 kB go binary
ALWAYS_BINARY = ("BYTES", "FP16", "BF16")  # "auto" sends these binary (Triton takes FP16 / BF16 only so)


def batch_arrays(samples: SampleSet, request: RequestSpec, start: int) -> dict[str, np.ndarray]:
    """The request's input arrays for the batch starting at sample `start` (wrapping around)."""
    n = len(samples)
    rows = [(start + k) % n for k in range(request.batch_size)]
    out = {}
    for spec in request.inputs:
        arrays = samples.inputs[spec.name]
        out[spec.name] = np.stack([arrays[r] for r in rows]) if request.batched else arrays[rows[0]]
    return out


def _binary(datatype: str, raw_size: int, binary: bool | str) -> bool:
    if binary == "auto":
        return datatype in ALWAYS_BINARY or raw_size > BINARY_AUTO_BYTES
    return bool(binary)


def http_body(arrays: dict[str, np.ndarray], request: RequestSpec, binary: bool | str) -> tuple[bytes, int | None]:
    """An HTTP infer body and its JSON header length (None without binary tensors)."""
    inputs, blobs = [], []
    for spec in request.inputs:
        arr = arrays[spec.name]
        entry: dict[str, object] = {"name": spec.name, "datatype": spec.datatype, "shape": list(arr.shape)}
        raw = to_raw(arr, spec.datatype)
        if _binary(spec.datatype, len(raw), binary):
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = to_json_data(arr, spec.datatype)
        inputs.append(entry)
    outputs = []
    for name in request.outputs:
        datatype = request.output_datatypes.get(name, "")
        shape = [request.batch_size if d < 0 else d for d in request.output_shapes.get(name, [-1])]
        size = int(np.prod(shape)) * (4 if datatype != "BYTES" else 16)
        outputs.append({"name": name, "parameters": {"binary_data": _binary(datatype, size, binary)}})
    header = orjson.dumps({"inputs": inputs, "outputs": outputs})
    return (header + b"".join(blobs), len(header)) if blobs else (header, None)


def grpc_request(arrays: dict[str, np.ndarray], request: RequestSpec, model: str, version: str):
    """A ModelInferRequest with raw_input_contents."""
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for spec in request.inputs:
        arr = arrays[spec.name]
        req.inputs.add(name=spec.name, datatype=spec.datatype, shape=list(arr.shape))
        req.raw_input_contents.append(to_raw(arr, spec.datatype))
    for name in request.outputs:
        req.outputs.add(name=name)
    return req


@dataclass
class Payloads:
    """One endpoint's pre-encoded requests: `encoded[k]` holds the batch starting at sample k × stride."""

    samples: SampleSet
    request: RequestSpec
    stride: int
    encoded: list

    def index(self, sample: int) -> int:
        """The request to send for an arrival's sample."""
        return (sample // self.stride) % len(self.encoded)

    def first_row(self, sample: int) -> int:
        """The sample the request for `sample` starts with (what the record calls its sample)."""
        return (self.index(sample) * self.stride) % len(self.samples)

    @classmethod
    def build(cls, samples: SampleSet, request: RequestSpec, stride: int, encode) -> "Payloads":
        starts = range(0, len(samples), stride)
        return cls(samples, request, stride, [encode(batch_arrays(samples, request, s)) for s in starts])


def wanted_outputs(check: Check | None, samples: SampleSet) -> tuple[str, ...]:
    """The outputs the sender decodes: the checked one, or those with validation data."""
    if check is None:
        return tuple(samples.expected)
    if check.kind == "validation" or check.output is None:
        return tuple(samples.expected)
    return (check.output,)


def decode_http_outputs(payload: bytes, header_length: int | None, wanted: tuple[str, ...]) -> tuple[dict, dict]:
    """(wanted outputs as arrays, the response's parameters) of an HTTP infer response."""
    header = payload if header_length is None else payload[:header_length]
    doc = orjson.loads(header)
    outputs, offset = {}, header_length or 0
    for o in doc["outputs"]:
        size = (o.get("parameters") or {}).get("binary_data_size")
        if o["name"] in wanted:
            shape = tuple(o["shape"])
            if size is not None:
                outputs[o["name"]] = from_raw(o["name"], o["datatype"], shape, memoryview(payload)[offset:offset + size])
            else:
                outputs[o["name"]] = from_json_data(o["name"], o["datatype"], shape, o["data"])
        if size is not None:
            offset += size
    missing = [n for n in wanted if n not in outputs]
    if missing:
        raise ValueError(f"the response has no output {', '.join(missing)}")
    return outputs, doc.get("parameters") or {}


def decode_grpc_outputs(response, wanted: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The wanted outputs of a ModelInferResponse (raw_output_contents)."""
    outputs = {}
    for i, o in enumerate(response.outputs):
        if o.name in wanted:
            outputs[o.name] = from_raw(o.name, o.datatype, tuple(o.shape), response.raw_output_contents[i])
    missing = [n for n in wanted if n not in outputs]
    if missing:
        raise ValueError(f"the response has no output {', '.join(missing)}")
    return outputs


@dataclass
class AnswerCheck:
    """Counts right answers of a request's rows against the data's labels or validation_data."""

    check: Check | None
    samples: SampleSet
    batched: bool

    @property
    def active(self) -> bool:
        return (self.check is not None and self.check.kind != "validation" and self.samples.labels is not None) or \
            bool(self.samples.expected)

    def label(self, first: int) -> int:
        labels = self.samples.labels
        return int(labels[first % len(labels)]) if labels is not None else -1

    def score(self, outputs: dict[str, np.ndarray] | None, first: int, rows: int) -> tuple[int, int]:
        """(right rows, the first row's prediction or -1); right rows is -1 when nothing is checked."""
        if not self.active:
            return -1, -1
        if outputs is None:
            return 0, -1
        n = len(self.samples)
        idx = [(first + k) % n for k in range(rows)]
        labels = self.samples.labels
        if self.check is not None and self.check.kind in ("label", "argmax") and self.check.output is not None \
                and labels is not None:
            out = outputs[self.check.output]
            per_row = out.reshape(rows, -1) if self.batched else out.reshape(1, -1)
            if self.check.kind == "argmax":
                predicted = per_row.astype(np.float64).argmax(axis=1)
            else:
                predicted = np.array([_as_int(v) for v in per_row[:, 0]], dtype=np.int64)
            truth = labels[idx[:len(predicted)]]
            return int(np.count_nonzero(predicted == truth)), int(predicted[0])
        right = 0
        for k, row in enumerate(idx):
            ok = True
            for name, expected in self.samples.expected.items():
                actual = outputs[name]
                actual = actual.reshape(rows, -1)[k] if self.batched else actual.reshape(-1)
                ok = ok and _close(actual, expected[row], self.check)
            right += ok
        return right, -1


class SchemaCheck:
    """Structured outputs: whether a reply's text is JSON that follows the endpoint's JSON Schema (jsonschema's
    validator for the schema's own draft, compiled once)."""

    def __init__(self, schema: dict) -> None:
        from jsonschema.validators import validator_for

        self.validator = validator_for(schema)(schema)

    def valid(self, text: str) -> int:
        """1: `text` is JSON and follows the schema; 0: it is not JSON, or does not follow it."""
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            return 0
        return int(self.validator.is_valid(doc))


def _as_int(value) -> int:
    try:
        return int(value.decode() if isinstance(value, bytes) else value)
    except (ValueError, TypeError):
        return -1


def _close(actual: np.ndarray, expected: np.ndarray, check: Check | None) -> bool:
    if actual.size != expected.size:
        return False
    if actual.dtype == object or expected.dtype == object:
        return [bytes(a) for a in actual.reshape(-1)] == [bytes(e) for e in expected.reshape(-1)]
    rtol, atol = (check.rtol, check.atol) if check is not None else (1e-3, 1e-5)
    return bool(np.allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol))
