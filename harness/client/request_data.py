"""The samples an endpoint is sent, read once before the start instant and checked against its request:
`random` (seeded, ranges per input, random strings for BYTES), `zero`, perf_analyzer's input-data JSON (read
unchanged, with its validation_data), `.npz` (one array per input, first axis = samples; labels), `.jsonl`
(one object per sample), or a directory of files for a single BYTES input (one file per sample; files in
sub-directories take the sub-directory's index as their label).

A bad file or a sample that does not fit the model raises DataError naming the file, the sample and the input.
"""
from __future__ import annotations

import base64
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tailrace.contract.plan import RunPlan
from tailrace.contract.profile import Endpoint
from tailrace.contract.requests import InputSpec, RequestSpec
from tailrace.contract.tensors import NUMPY_DTYPES, element_count, to_array

RANDOM, ZERO = "random", "zero"
_INT_RANGE = (0, 100)  # random integers when the profile gives no range: small, valid as ids / indices
_STRING_LENGTH = 16


class DataError(ValueError):
    """Data that cannot be sent to the model; the message names the file, the sample and the input."""


@dataclass
class SampleSet:
    """Per-sample input arrays (per-sample shapes, no batch dimension), optional labels and expected outputs."""

    inputs: dict[str, list[np.ndarray]]
    source: str
    labels: np.ndarray | None = None  # int64, one per sample
    expected: dict[str, list[np.ndarray]] = field(default_factory=dict)  # validation_data, per output

    def __len__(self) -> int:
        return len(next(iter(self.inputs.values()))) if self.inputs else 0

    def sample_bytes(self) -> int:
        """Bytes of tensor data in the first sample (BYTES: the strings' lengths)."""
        total = 0
        for arrays in self.inputs.values():
            a = arrays[0]
            total += sum(len(v) for v in a.reshape(-1)) if a.dtype == object else a.nbytes
        return total


def samples_for(plan: RunPlan, endpoint: Endpoint, request: RequestSpec) -> SampleSet:
    """The samples of one endpoint of the plan (random data seeded from the run's seed and the endpoint)."""
    inputs = plan.profile.inputs
    index = [e.name for e in plan.profile.endpoints].index(endpoint.name)
    return load_samples(plan.data_source(endpoint), endpoint, request, plan.profile.load.seed + index,
                        inputs.max_samples, inputs.max_encoded_mb * 2**20 / max(1, request.batch_size))


def load_samples(source: str, endpoint: Endpoint, request: RequestSpec, seed: int, max_samples: int,
                 max_bytes: float) -> SampleSet:
    """The samples of `source` ('random', 'zero' or a path) for `request`, at most `max_samples` and about
    `max_bytes` of tensor data, every sample checked against the request's inputs."""
    if source in (RANDOM, ZERO):
        one = _made_up(request, endpoint, source, np.random.default_rng(seed), 1)
        n = max(1, min(max_samples, int(max_bytes // max(1, one.sample_bytes()))))
        samples = _made_up(request, endpoint, source, np.random.default_rng(seed), n if source == RANDOM else 1)
    else:
        path = Path(source)
        if not path.exists():
            raise DataError(f"data {source}: no such file or directory")
        if path.is_dir():
            samples = _from_directory(path, request)
        elif path.suffix == ".npz":
            samples = _from_npz(path, request, endpoint)
        elif path.suffix == ".jsonl":
            samples = _from_jsonl(path, request, endpoint)
        elif path.suffix == ".json":
            samples = _from_perf_analyzer(path, request)
        else:
            raise DataError(f"data {source}: unknown kind of file (perf_analyzer .json, .npz, .jsonl or a directory)")
        samples = _first(samples, max_samples)
    check_samples(samples, request)
    if endpoint.check is not None and endpoint.check.kind in ("label", "argmax") and samples.labels is None:
        raise DataError(f"data {samples.source}: check.kind {endpoint.check.kind!r} needs labels "
                        f"({endpoint.check.labels!r}) and the data has none")
    if endpoint.check is not None and endpoint.check.kind == "validation" and not samples.expected:
        raise DataError(f"data {samples.source}: check.kind 'validation' needs validation_data and the data has none")
    return samples


def _first(samples: SampleSet, n: int) -> SampleSet:
    if len(samples) <= n:
        return samples
    return SampleSet({k: v[:n] for k, v in samples.inputs.items()}, samples.source,
                     None if samples.labels is None else samples.labels[:n],
                     {k: v[:n] for k, v in samples.expected.items()})


def _concrete(spec: InputSpec, source: str) -> tuple[int, ...]:
    if any(d < 0 for d in spec.shape):
        raise DataError(f"data {source}: input {spec.name!r} has a dynamic shape {spec.shape}; give it with "
                        f"shapes = {{ {spec.name} = [...] }}")
    return tuple(spec.shape)


def _made_up(request: RequestSpec, endpoint: Endpoint, kind: str, rng: np.random.Generator, n: int) -> SampleSet:
    inputs: dict[str, list[np.ndarray]] = {}
    for spec in request.inputs:
        shape = _concrete(spec, kind)
        inputs[spec.name] = [_made_up_tensor(spec.datatype, shape, endpoint.ranges.get(spec.name), rng, kind)
                             for _ in range(n)]
    return SampleSet(inputs, kind)


def _made_up_tensor(datatype: str, shape: tuple[int, ...], value_range: list[float] | None,
                    rng: np.random.Generator, kind: str) -> np.ndarray:
    size = element_count(shape)
    if datatype == "BYTES":
        out = np.empty(size, dtype=object)
        letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)
        for i in range(size):
            out[i] = b"" if kind == ZERO else letters[rng.integers(0, len(letters), _STRING_LENGTH)].tobytes()
        return out.reshape(shape)
    dtype = NUMPY_DTYPES[datatype]
    if kind == ZERO:
        return np.zeros(shape, dtype=dtype)
    if datatype == "BOOL":
        return rng.integers(0, 2, size).astype(np.bool_).reshape(shape)
    if dtype.kind in "iu":
        low, high = value_range or _INT_RANGE
        info = np.iinfo(dtype)
        low, high = max(int(low), int(info.min)), min(int(high), int(info.max) + 1)
        return rng.integers(low, high, size).astype(dtype).reshape(shape)
    low, high = value_range or (0.0, 1.0)
    return rng.uniform(low, high, size).astype(np.float32).astype(dtype).reshape(shape)


def check_samples(samples: SampleSet, request: RequestSpec) -> None:
    """Every sample has every input, with the input's datatype and a shape that fits (DataError otherwise)."""
    wanted = {s.name: s for s in request.inputs}
    for name in samples.inputs:
        if name not in wanted:
            raise DataError(f"data {samples.source}: input {name!r}: the model has no such input (its inputs: "
                            f"{', '.join(wanted)})")
    for spec in request.inputs:
        arrays = samples.inputs.get(spec.name)
        if arrays is None:
            raise DataError(f"data {samples.source}: input {spec.name!r}: the model needs it and the data has none")
        for i, a in enumerate(arrays):
            fits = a.ndim == len(spec.shape) and all(w < 0 or d == w for d, w in zip(a.shape, spec.shape))
            if not fits:
                raise DataError(f"data {samples.source}: sample {i}, input {spec.name!r}: shape {list(a.shape)} does "
                                f"not fit the model's {spec.shape} (batch dimension left out)")
    if not len(samples):
        raise DataError(f"data {samples.source}: no samples")
    if request.batch_size > 1:
        for spec in request.inputs:
            shapes = {a.shape for a in samples.inputs[spec.name]}
            if len(shapes) > 1:
                raise DataError(f"data {samples.source}: input {spec.name!r} has samples of different shapes "
                                f"({len(shapes)} kinds); batch_size {request.batch_size} needs one shape")


def _tensor(source: str, i: int, spec: InputSpec, value) -> np.ndarray:
    """One sample's value of one input, in perf_analyzer's forms: a list, {"content": [...], "shape": [...]},
    or {"b64": "..."} (the tensor's raw bytes; for BYTES, the bytes of one element)."""
    where = f"data {source}: sample {i}, input {spec.name!r}"
    shape = None
    if isinstance(value, dict):
        if "b64" in value:
            try:
                raw = base64.b64decode(value["b64"], validate=True)
            except (ValueError, TypeError) as exc:
                raise DataError(f"{where}: b64 is not base64: {exc}") from None
            if spec.datatype == "BYTES":
                out = np.empty(1, dtype=object)
                out[0] = raw
                return out.reshape(value.get("shape") or [1] * len(spec.shape) or [])
            dtype = NUMPY_DTYPES[spec.datatype]
            if len(raw) % dtype.itemsize:
                raise DataError(f"{where}: {len(raw)} bytes of b64 data is not a whole number of {spec.datatype}")
            arr = np.frombuffer(raw, dtype=dtype)
            return _reshape(where, arr, value.get("shape") or spec.shape)
        if "content" not in value:
            raise DataError(f"{where}: an object needs 'content' (and optionally 'shape') or 'b64'")
        shape, value = value.get("shape"), value["content"]
    try:
        arr = to_array(spec.name, spec.datatype, value if isinstance(value, list) else [value])
    except ValueError as exc:
        raise DataError(f"{where}: {exc}") from None
    if arr.ndim > 1 and shape is None and arr.ndim == len(spec.shape):
        return arr
    return _reshape(where, arr.reshape(-1), shape or spec.shape)


def _reshape(where: str, arr: np.ndarray, shape) -> np.ndarray:
    if not isinstance(shape, list | tuple) or not all(isinstance(d, int) for d in shape):
        raise DataError(f"{where}: shape must be a list of integers, got {shape!r}")
    if any(d < 0 for d in shape):
        known = element_count([d for d in shape if d >= 0])
        if list(shape).count(-1) == 1 and known and arr.size % known == 0:
            shape = [arr.size // known if d < 0 else d for d in shape]
        else:
            raise DataError(f"{where}: the model's shape {list(shape)} is dynamic; give 'shape' with the content "
                            f"or shapes in the profile")
    if arr.size != element_count(shape):
        raise DataError(f"{where}: {arr.size} values, shape {list(shape)} needs {element_count(shape)}")
    return arr.reshape(shape)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"data {path}: not readable JSON: {exc}") from None


def _from_perf_analyzer(path: Path, request: RequestSpec) -> SampleSet:
    """perf_analyzer's --input-data JSON: {"data": [{NAME: ...}, ...] or [[steps of a stream], ...],
    "validation_data": [{OUTPUT: ...}, ...]}."""
    doc = _read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise DataError(f"data {path}: a perf_analyzer input-data file is an object with a 'data' list")
    entries = _steps(doc["data"])
    specs = {s.name: s for s in request.inputs}
    inputs: dict[str, list[np.ndarray]] = {n: [] for n in specs}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise DataError(f"data {path}: data[{i}] must be an object of inputs")
        _add_sample(path, i, entry, specs, inputs)
    expected: dict[str, list[np.ndarray]] = {}
    validation = doc.get("validation_data")
    if validation is not None:
        steps = _steps(validation) if isinstance(validation, list) else None
        if steps is None or len(steps) != len(entries):
            raise DataError(f"data {path}: validation_data must list one entry per data entry ({len(entries)})")
        for i, entry in enumerate(steps):
            for name, value in entry.items():
                datatype = request.output_datatypes.get(name) or "FP32"
                out_spec = InputSpec(name=name, datatype=datatype, shape=[-1])
                where = f"data {path}: validation_data[{i}], output {name!r}"
                if name not in request.outputs:
                    raise DataError(f"{where}: not among the outputs asked for ({', '.join(request.outputs)})")
                value = value.get("content", value) if isinstance(value, dict) and "b64" not in value else value
                expected.setdefault(name, []).append(_tensor(str(path), i, out_spec, value).reshape(-1))
    return SampleSet(inputs, str(path), None, expected)


def _add_sample(path: Path, i: int, entry: dict, specs: dict[str, InputSpec], inputs: dict[str, list]) -> None:
    """Sample `i`'s value of every input (perf_analyzer's value forms), appended; DataError for an input the model
    lacks or one it needs and the sample lacks."""
    for name in entry:
        if name not in specs:
            raise DataError(f"data {path}: sample {i}, input {name!r}: the model has no such input (its inputs: "
                            f"{', '.join(specs)})")
    for name, spec in specs.items():
        if name not in entry:
            raise DataError(f"data {path}: sample {i}, input {name!r}: the model needs it and the sample has none")
        inputs[name].append(_tensor(str(path), i, spec, entry[name]))


def _steps(data: list) -> list:
    """perf_analyzer's streams ([[step, ...], ...]) flattened; a flat list as it is."""
    if data and all(isinstance(d, list) for d in data):
        return [step for stream in data for step in stream]
    return data


def _labels_from(values, source: str) -> np.ndarray:
    try:
        return np.asarray(values).astype(np.int64).reshape(-1)
    except (ValueError, TypeError) as exc:
        raise DataError(f"data {source}: labels must be integers: {exc}") from None


def _from_npz(path: Path, request: RequestSpec, endpoint: Endpoint) -> SampleSet:
    """One array per input (first axis = samples); the label array (check.labels, default 'labels'). A model
    with one input takes the file's only other array whatever its name."""
    label_key = endpoint.check.labels if endpoint.check else "labels"
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # a damaged or truncated file
        raise DataError(f"data {path}: not a readable .npz: {exc}") from None
    names = [s.name for s in request.inputs]
    if label_key == "labels" and "labels" not in arrays and set(arrays) == {"X", "y"} and len(names) == 1:
        arrays = {names[0]: arrays["X"], "labels": arrays["y"]}  # a digits file of an older tailrace (X, y)
    labels = _labels_from(arrays.pop(label_key), str(path)) if label_key in arrays else None
    if len(names) == 1 and names[0] not in arrays and len(arrays) == 1:
        arrays = {names[0]: next(iter(arrays.values()))}
    inputs = {}
    for spec in request.inputs:
        if spec.name not in arrays:
            raise DataError(f"data {path}: input {spec.name!r}: the model needs it and the file has no such array "
                            f"(arrays: {', '.join(sorted(arrays)) or 'none'})")
        arr = arrays.pop(spec.name)
        try:
            arr = to_array(spec.name, spec.datatype, arr)
        except ValueError as exc:
            raise DataError(f"data {path}: {exc}") from None
        inputs[spec.name] = list(arr)
    if arrays:
        raise DataError(f"data {path}: array(s) {', '.join(sorted(arrays))} match no input of the model (its inputs: "
                        f"{', '.join(names)}) and are not its labels ({label_key!r})")
    counts = {len(v) for v in inputs.values()} | ({len(labels)} if labels is not None else set())
    if len(counts) > 1:
        raise DataError(f"data {path}: the arrays hold different numbers of samples ({sorted(counts)})")
    return SampleSet(inputs, str(path), labels)


def _from_jsonl(path: Path, request: RequestSpec, endpoint: Endpoint) -> SampleSet:
    """One JSON object per line: the inputs (perf_analyzer's value forms) and optionally the label."""
    label_key = endpoint.check.labels if endpoint.check else "labels"
    specs = {s.name: s for s in request.inputs}
    inputs: dict[str, list[np.ndarray]] = {n: [] for n in specs}
    labels = []
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"data {path}: not readable: {exc}") from None
    for i, line in enumerate(lines):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"data {path}: line {i + 1} is not JSON: {exc}") from None
        if not isinstance(entry, dict):
            raise DataError(f"data {path}: line {i + 1} must be an object of inputs")
        if label_key in entry:
            labels.append(entry.pop(label_key))
        _add_sample(path, i, entry, specs, inputs)
    if labels and len(labels) != len(lines):
        raise DataError(f"data {path}: {len(labels)} of {len(lines)} lines have a label ({label_key!r}); all or none")
    return SampleSet(inputs, str(path), _labels_from(labels, str(path)) if labels else None)


def _from_directory(path: Path, request: RequestSpec) -> SampleSet:
    """One file per sample for the model's single BYTES input; sub-directories are classes (their index)."""
    if len(request.inputs) != 1 or request.inputs[0].datatype != "BYTES":
        raise DataError(f"data {path}: a directory feeds a model with one BYTES input; this model takes "
                        f"{', '.join(f'{s.name} {s.datatype}' for s in request.inputs)}")
    spec = request.inputs[0]
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise DataError(f"data {path}: the directory holds no files")
    classes = sorted({f.parent for f in files})
    labelled = all(f.parent != path for f in files)
    shape = tuple(1 if d < 0 else d for d in spec.shape)
    if element_count(shape) != 1:
        raise DataError(f"data {path}: input {spec.name!r} takes {element_count(shape)} elements per sample; a file "
                        f"is one")
    samples = []
    for f in files:
        arr = np.empty(1, dtype=object)
        arr[0] = f.read_bytes()
        samples.append(arr.reshape(shape))
    labels = np.array([classes.index(f.parent) for f in files], dtype=np.int64) if labelled else None
    return SampleSet({spec.name: samples}, str(path), labels)
