"""Triton `config.pbtxt` read/write through Triton's own ModelConfig protobuf (shipped by tritonclient), and
the config of an ONNX model completed from its graph when `config.pbtxt` is absent or names no tensors (as
Triton's onnxruntime backend does: names, datatypes, shapes; `max_batch_size` when every tensor's first
dimension is dynamic; ONNX string tensors are BYTES).

A `ModelSpec`'s tensor shapes are the full request shapes: with `max_batch_size` > 0 they begin with the
batch dimension (-1), which Triton's config leaves out of `dims`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tailrace.contract.tensors import TensorSpec, onnx_tensors

# Triton's config datatype enum names → KServe v2 datatype strings.
_CONFIG_TO_V2 = {
    "TYPE_BOOL": "BOOL", "TYPE_UINT8": "UINT8", "TYPE_UINT16": "UINT16", "TYPE_UINT32": "UINT32",
    "TYPE_UINT64": "UINT64", "TYPE_INT8": "INT8", "TYPE_INT16": "INT16", "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64", "TYPE_FP16": "FP16", "TYPE_FP32": "FP32", "TYPE_FP64": "FP64",
    "TYPE_STRING": "BYTES",
}
_V2_TO_CONFIG = {v: k for k, v in _CONFIG_TO_V2.items()}
QUEUE_PARAMETER = "max_queue_size"
DEFAULT_MAX_BATCH = 4  # Triton's onnxruntime backend's default-max-batch-size for a completed config
ONNX_BACKENDS = ("onnxruntime", "onnxruntime_onnx")



@dataclass(frozen=True)
class ModelSpec:
    """What the embedded server needs to know about one model of the repository."""

    name: str
    backend: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    instance_count: int = 1
    max_batch_size: int = 0  # > 0: every tensor's first dimension is the batch (at most this many rows)
    max_queue_size: int = 0
    parameters: dict[str, str] = field(default_factory=dict)
    directory: Path | None = None
    decoupled: bool = False  # model_transaction_policy.decoupled: any number of responses per request

    def __post_init__(self) -> None:
        object.__setattr__(self, "_inputs_by_name", {t.name: t for t in self.inputs})
        object.__setattr__(self, "output_names", [t.name for t in self.outputs])

    def input(self, name: str) -> TensorSpec | None:
        """The input called `name`, or None."""
        return self._inputs_by_name.get(name)


def to_config(spec: ModelSpec) -> model_config_pb2.ModelConfig:
    """`spec` as Triton's ModelConfig message."""
    cfg = model_config_pb2.ModelConfig()
    cfg.name = spec.name
    cfg.backend = spec.backend
    cfg.max_batch_size = spec.max_batch_size
    for src, dst in ((spec.inputs, cfg.input), (spec.outputs, cfg.output)):
        for t in src:
            entry = dst.add()
            entry.name = t.name
            entry.data_type = model_config_pb2.DataType.Value(_V2_TO_CONFIG[t.datatype])
            entry.dims.extend(t.shape[1:] if spec.max_batch_size > 0 else t.shape)
    group = cfg.instance_group.add()
    group.count = spec.instance_count
    group.kind = model_config_pb2.ModelInstanceGroup.KIND_CPU
    if spec.decoupled:
        cfg.model_transaction_policy.decoupled = True
    params = dict(spec.parameters)
    if spec.max_queue_size:
        # A parameter, not dynamic_batching.default_queue_policy: Triton refuses dynamic batching
        # for max_batch_size 0 models, and the file must stay servable by Triton unchanged.
        params[QUEUE_PARAMETER] = str(spec.max_queue_size)
    for key, value in sorted(params.items()):
        cfg.parameters[key].string_value = value
    return cfg


def write_config(path: Path, spec: ModelSpec) -> None:
    """Write `spec` as a Triton config.pbtxt."""
    path.write_text(text_format.MessageToString(to_config(spec)))


def read_config(path: Path) -> ModelSpec:
    """Parse a Triton config.pbtxt into a ModelSpec; raises ValueError naming the file on bad input."""
    try:
        cfg = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a valid Triton model config: {exc}") from exc

    batch = (-1,) if cfg.max_batch_size > 0 else ()

    def tensors(entries) -> tuple[TensorSpec, ...]:
        out = []
        for e in entries:
            type_name = model_config_pb2.DataType.Name(e.data_type)
            if type_name not in _CONFIG_TO_V2:
                raise ValueError(f"{path}: tensor {e.name!r} has unsupported data_type {type_name}")
            out.append(TensorSpec(e.name, _CONFIG_TO_V2[type_name], batch + tuple(int(d) for d in e.dims)))
        return tuple(out)

    name = cfg.name or path.parent.name
    count = sum(g.count or 1 for g in cfg.instance_group) or 1
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    queue = cfg.dynamic_batching.default_queue_policy.max_queue_size if cfg.HasField("dynamic_batching") else 0
    if QUEUE_PARAMETER in params:
        try:
            queue = int(params.pop(QUEUE_PARAMETER))
        except ValueError as exc:
            raise ValueError(f"{path}: parameter {QUEUE_PARAMETER} must be an integer") from exc
    spec = ModelSpec(
        name=name,
        backend=cfg.backend or cfg.platform,
        inputs=tensors(cfg.input),
        outputs=tensors(cfg.output),
        instance_count=count,
        max_batch_size=int(cfg.max_batch_size),
        max_queue_size=int(queue),
        parameters=params,
        directory=path.parent,
        decoupled=bool(cfg.model_transaction_policy.decoupled),
    )
    onnx_file = path.parent / "1" / "model.onnx"
    if not spec.inputs and spec.backend in ONNX_BACKENDS and onnx_file.is_file():
        completed = spec_from_onnx(onnx_file, name)
        spec = ModelSpec(name=name, backend=spec.backend, inputs=completed.inputs, outputs=completed.outputs,
                         instance_count=count, max_batch_size=completed.max_batch_size, max_queue_size=int(queue),
                         parameters=params, directory=path.parent)
    return spec


def spec_from_onnx(onnx_file: Path, name: str) -> ModelSpec:
    """A model's config completed from its ONNX graph (contract/tensors.py's onnx_tensors); max_batch_size
    DEFAULT_MAX_BATCH when every tensor's first dimension is dynamic, else 0."""
    inputs, outputs = onnx_tensors(onnx_file)
    batched = all(t.shape and t.shape[0] == -1 for t in inputs + outputs)
    return ModelSpec(name=name, backend="onnxruntime", inputs=inputs, outputs=outputs,
                     max_batch_size=DEFAULT_MAX_BATCH if batched else 0, directory=onnx_file.parent.parent)


def model_spec(model_dir: Path) -> ModelSpec:
    """The spec of one model directory: its config.pbtxt, or completed from `1/model.onnx` without one."""
    config = model_dir / "config.pbtxt"
    if config.is_file():
        return read_config(config)
    return spec_from_onnx(model_dir / "1" / "model.onnx", model_dir.name)


def config_as_json(spec: ModelSpec) -> dict:
    """The model config in the JSON shape Triton's `/v2/models/{m}/config` returns (the file as written, its
    tensors completed from the graph when it names none)."""
    from google.protobuf.json_format import MessageToDict

    config = spec.directory / "config.pbtxt" if spec.directory else None
    if config is not None and config.is_file():
        cfg = text_format.Parse(config.read_text(), model_config_pb2.ModelConfig())
        if not cfg.input:
            completed = to_config(spec)
            cfg.max_batch_size = completed.max_batch_size
            cfg.input.extend(completed.input)
            cfg.output.extend(completed.output)
    else:
        cfg = to_config(spec)
    return MessageToDict(cfg, preserving_proto_field_name=True)
