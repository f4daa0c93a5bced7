"""KServe v2 (Open Inference Protocol) tensors, shared by the generator and the embedded server: the datatypes
and their numpy types, BYTES' length-prefixed wire form, and one tensor's bytes or JSON data in either
direction. Pure functions; every refusal is a ValueError naming the tensor.

BF16 uses `ml_dtypes.bfloat16` (the numpy dtype JAX and ONNX use). BYTES tensors are numpy object arrays of
`bytes`; on the wire (binary extension, `raw_input_contents`) each element is a 4-byte little-endian length
and its bytes, in JSON a string.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import ml_dtypes
import numpy as np

NUMPY_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "UINT8": np.dtype(np.uint8), "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32), "UINT64": np.dtype(np.uint64), "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16), "INT32": np.dtype(np.int32), "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16), "FP32": np.dtype(np.float32), "FP64": np.dtype(np.float64),
    "BF16": np.dtype(ml_dtypes.bfloat16), "BYTES": np.dtype(object),
}
DATATYPES = tuple(NUMPY_DTYPES)
V2_DATATYPE = {v: k for k, v in NUMPY_DTYPES.items() if k != "BYTES"}
FLOATS = ("FP16", "FP32", "FP64", "BF16")
_LENGTH = struct.Struct("<I")
# ONNX TensorProto element types → KServe v2 datatypes (ONNX string tensors are BYTES)
ONNX_TO_V2 = {1: "FP32", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64", 8: "BYTES",
              9: "BOOL", 10: "FP16", 11: "FP64", 12: "UINT32", 13: "UINT64", 16: "BF16"}


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as a server describes it: name, KServe v2 datatype, shape (-1 = any size)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.name} {self.datatype} {list(self.shape)}"


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    return math.prod(shape) if shape else 1


def datatype_of(arr: np.ndarray) -> str:
    """The KServe datatype of a numpy array (object / str / bytes arrays are BYTES)."""
    if arr.dtype.kind in "OSU":
        return "BYTES"
    try:
        return V2_DATATYPE[arr.dtype]
    except KeyError:
        raise ValueError(f"numpy dtype {arr.dtype} has no KServe v2 datatype") from None


def as_bytes_array(values, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """An object array of `bytes` (str elements encoded as UTF-8)."""
    arr = np.asarray(values, dtype=object)
    out = np.empty(arr.shape, dtype=object)
    flat_in, flat_out = arr.reshape(-1), out.reshape(-1)
    for i, v in enumerate(flat_in):
        flat_out[i] = v.encode() if isinstance(v, str) else bytes(v)
    return out if shape is None else out.reshape(shape)


def to_array(name: str, datatype: str, values, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """`values` (nested lists, numbers, strings, an array) as an array of `datatype`, reshaped to `shape`."""
    if datatype not in NUMPY_DTYPES:
        raise ValueError(f"tensor {name!r}: unknown datatype {datatype!r} (KServe v2: {', '.join(DATATYPES)})")
    try:
        arr = as_bytes_array(values) if datatype == "BYTES" else np.asarray(values, dtype=NUMPY_DTYPES[datatype])
    except (ValueError, TypeError, OverflowError, AttributeError) as exc:
        raise ValueError(f"tensor {name!r}: values cannot be read as {datatype}: {exc}") from None
    if shape is None:
        return arr
    if arr.size != element_count(shape):
        raise ValueError(f"tensor {name!r}: {arr.size} elements given, shape {list(shape)} needs "
                         f"{element_count(shape)}")
    return arr.reshape(shape)


def serialize_bytes(arr: np.ndarray) -> bytes:
    """A BYTES tensor's wire form: each element, row-major, as a 4-byte little-endian length and its bytes."""
    parts = []
    for v in arr.reshape(-1):
        b = v.encode() if isinstance(v, str) else bytes(v)
        parts.append(_LENGTH.pack(len(b)))
        parts.append(b)
    return b"".join(parts)


def deserialize_bytes(name: str, raw: bytes | memoryview, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The inverse of serialize_bytes; ValueError when a length runs past the data or the count is wrong."""
    view, out, pos = memoryview(raw), [], 0
    while pos < len(view):
        if pos + 4 > len(view):
            raise ValueError(f"tensor {name!r}: BYTES data ends inside an element's length")
        (n,) = _LENGTH.unpack_from(view, pos)
        pos += 4
        if pos + n > len(view):
            raise ValueError(f"tensor {name!r}: a BYTES element of {n} bytes runs past the data")
        out.append(bytes(view[pos:pos + n]))
        pos += n
    arr = np.empty(len(out), dtype=object)
    arr[:] = out
    if shape is not None and arr.size != element_count(shape):
        raise ValueError(f"tensor {name!r}: {arr.size} BYTES elements, shape {list(shape)} needs "
                         f"{element_count(shape)}")
    return arr if shape is None else arr.reshape(shape)


def to_raw(arr: np.ndarray, datatype: str) -> bytes:
    """One tensor's binary form (binary extension, raw_input_contents / raw_output_contents)."""
    if datatype == "BYTES":
        return serialize_bytes(arr)
    return np.ascontiguousarray(arr, dtype=NUMPY_DTYPES[datatype]).tobytes()


def from_raw(name: str, datatype: str, shape: tuple[int, ...], raw: bytes | memoryview) -> np.ndarray:
    """The array a tensor's binary form holds; ValueError when the byte count does not fit the shape."""
    if datatype == "BYTES":
        return deserialize_bytes(name, raw, shape)
    dtype = NUMPY_DTYPES[datatype]
    expected = element_count(shape) * dtype.itemsize
    if len(raw) != expected:
        raise ValueError(f"tensor {name!r}: {len(raw)} bytes of binary data, shape {list(shape)} of {datatype} "
                         f"needs {expected}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def to_json_data(arr: np.ndarray, datatype: str) -> list:
    """A tensor's JSON `data`: flat, row-major; BYTES as strings (UTF-8, else latin-1 so every byte survives)."""
    flat = arr.reshape(-1)
    if datatype == "BYTES":
        out = []
        for v in flat:
            b = v.encode() if isinstance(v, str) else bytes(v)
            try:
                out.append(b.decode())
            except UnicodeDecodeError:
                out.append(b.decode("latin-1"))
        return out
    if datatype in ("FP16", "BF16"):
        return flat.astype(np.float32).tolist()
    return flat.tolist()


def from_json_data(name: str, datatype: str, shape: tuple[int, ...], data) -> np.ndarray:
    """The array a tensor's JSON `data` (flat or nested) holds."""
    if not isinstance(data, list):
        raise ValueError(f"tensor {name!r}: 'data' must be a list, got {type(data).__name__}")
    if datatype == "BYTES":
        flat = _flatten(data)
        if not all(isinstance(v, str) for v in flat):
            raise ValueError(f"tensor {name!r}: BYTES data must be strings")
        return to_array(name, datatype, flat, shape)
    if datatype in ("FP16", "BF16"):  # via float32: numpy parses lists to float32 exactly, then rounds once
        arr = to_array(name, "FP32", data)
        return to_array(name, datatype, arr.astype(NUMPY_DTYPES[datatype]), shape)
    return to_array(name, datatype, data, shape)


def _flatten(data: list) -> list:
    out: list = []
    stack = [iter(data)]
    while stack:
        for v in stack[-1]:
            if isinstance(v, list):
                stack.append(iter(v))
                break
            out.append(v)
        else:
            stack.pop()
    return out


def onnx_tensors(onnx_file) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """(inputs, outputs) of an ONNX file's graph: graph inputs that are not initializers, with their datatypes
    and shapes (a symbolic or missing dimension is -1); ValueError naming the file when it cannot be read."""
    import onnx

    try:
        graph = onnx.load(str(onnx_file), load_external_data=False).graph
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends: a damaged file
        raise ValueError(f"{onnx_file}: not a readable ONNX model: {exc}") from None
    initializers = {t.name for t in graph.initializer}

    def tensors(values) -> tuple[TensorSpec, ...]:
        out = []
        for v in values:
            if v.name in initializers:
                continue
            t = v.type.tensor_type
            if t.elem_type not in ONNX_TO_V2:
                raise ValueError(f"{onnx_file}: tensor {v.name!r} has ONNX element type {t.elem_type}, which has no "
                                 f"KServe v2 datatype")
            dims = tuple(int(d.dim_value) if d.HasField("dim_value") else -1 for d in t.shape.dim)
            out.append(TensorSpec(v.name, ONNX_TO_V2[t.elem_type], dims))
        return tuple(out)

    return tensors(graph.input), tensors(graph.output)
