"""Deterministic model builds into a Triton-layout model repository.

digits (scikit-learn's bundled 8×8 digits, no download) → LogisticRegression and MLP → ONNX fp32
(skl2onnx) → MLP also ONNX int8 (onnxruntime dynamic quantization); plus `synthetic_mm1`, a
nearest-centroid classifier whose service time is exponential with a configurable mean and which has
a single execution slot, so that the server behaves as an M/M/1 queue under Poisson load.
"""
from __future__ import annotations

import hashlib
import json
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tailrace.contract.internal_processes import MODELS_BUILD, ModelsBuildOptions, options_from_argv
from tailrace.contract.tensors import TensorSpec
from tailrace.endpoints.models.generative_build import GENERATIVE_MODELS, build_generative
from tailrace.endpoints.models.model_config import ModelSpec, write_config
from tailrace.endpoints.models.model_zoo import ZOO_MODELS, build_zoo
from tailrace.endpoints.models.onnx_tools import dedupe_opsets, onnx_parameter_count

SEED = 20261121
N_FEATURES = 64
N_CLASSES = 10
DATA_FILE = Path("_data") / "digits_test.npz"
ONNX_MODELS = ("digits_logreg_fp32", "digits_mlp_fp32", "digits_mlp_int8")
SYNTHETIC_MODEL = "synthetic_mm1"
ALL_MODELS = ONNX_MODELS + (SYNTHETIC_MODEL,) + ZOO_MODELS + GENERATIVE_MODELS

_DIGITS_INPUTS = (TensorSpec("input", "FP32", (-1, N_FEATURES)),)
_DIGITS_OUTPUTS = (TensorSpec("label", "INT64", (-1,)), TensorSpec("probabilities", "FP32", (-1, N_CLASSES)))


@dataclass(frozen=True)
class BuiltModel:
    """What the build reports for one model."""

    name: str
    accuracy: float | None  # None: not a classifier (the generative models)
    size_bytes: int
    parameters: int
    sha256: str


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """digits split 70/30 with a fixed seed: X_train, X_test (float32), y_train, y_test (int64)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    X = digits.data.astype(np.float32)
    y = digits.target.astype(np.int64)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=SEED, stratify=y)
    return X_train, X_test, y_train, y_test


def _to_onnx(model) -> "onnx.ModelProto":  # noqa: F821
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType

    onx = to_onnx(model, initial_types=[("input", FloatTensorType([None, N_FEATURES]))],
                  options={id(model): {"zipmap": False}}, target_opset=17)
    return dedupe_opsets(onx)


def _quantize_int8(fp32_path: Path, out_path: Path) -> None:
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)  # ORT's pre-processing advice is noise for this model

    quantize_dynamic(str(fp32_path), str(out_path), weight_type=QuantType.QInt8)


def onnx_accuracy(path: Path, X: np.ndarray, y: np.ndarray) -> float:
    """Held-out accuracy of an ONNX classifier file run through onnxruntime."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    labels = sess.run(["label"], {"input": X})[0]
    return float(np.mean(labels == y))


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import skl2onnx
    import sklearn

    return {"python": platform.python_version(), "numpy": np.__version__, "scikit-learn": sklearn.__version__,
            "skl2onnx": skl2onnx.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def _write_metadata(model_dir: Path, artifact: Path, accuracy: float | None, parameters: int, extra: dict
                    ) -> BuiltModel:
    meta = {
        "name": model_dir.name,
        "artifact": str(artifact.relative_to(model_dir)),
        "sha256": sha256_of(artifact),
        "size_bytes": artifact.stat().st_size,
        "parameters": parameters,
        "heldout_accuracy": None if accuracy is None else round(accuracy, 6),
        "dataset": f"sklearn digits, 30% stratified hold-out, seed {SEED}",
        "build_versions": _versions(),
        **extra,
    }
    (model_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return BuiltModel(model_dir.name, accuracy, meta["size_bytes"], parameters, meta["sha256"])


def _build_onnx_model(out: Path, name: str, onx_bytes: bytes | None, X_test, y_test, quantize_from: Path | None,
                      note: str) -> BuiltModel:
    model_dir = out / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    artifact = model_dir / "1" / "model.onnx"
    if quantize_from is not None:
        _quantize_int8(quantize_from, artifact)
    else:
        artifact.write_bytes(onx_bytes)
    write_config(model_dir / "config.pbtxt", ModelSpec(
        name=name, backend="onnxruntime", inputs=_DIGITS_INPUTS, outputs=_DIGITS_OUTPUTS,
        instance_count=1, max_queue_size=256))
    return _write_metadata(model_dir, artifact, onnx_accuracy(artifact, X_test, y_test),
                           onnx_parameter_count(artifact), {"description": note})


_TRITON_PYTHON_MODEL = '''"""Triton Python-backend twin of tailrace's synthetic_mm1: nearest centroid + exponential service time."""
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.mean_s = float(params.get("service_time_mean_ms", "2")) / 1000.0
        self.rng = np.random.default_rng(int(params.get("seed", "0")))
        self.centroids = np.load(os.path.join(os.path.dirname(__file__), "centroids.npy"))

    def execute(self, requests):
        responses = []
        for request in requests:
            start = time.perf_counter()
            x = pb_utils.get_input_tensor_by_name(request, "input").as_numpy()
            d = ((x[:, None, :] - self.centroids[None, :, :]) ** 2).sum(axis=2)
            label = d.argmin(axis=1).astype(np.int64)
            proba = np.exp(-(d - d.min(axis=1, keepdims=True)) / 1000.0).astype(np.float32)
            proba /= proba.sum(axis=1, keepdims=True)
            remaining = self.rng.exponential(self.mean_s) - (time.perf_counter() - start)
            if remaining > 0:
                time.sleep(remaining)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("label", label), pb_utils.Tensor("probabilities", proba)]))
        return responses
'''


def _build_synthetic(out: Path, X_train, X_test, y_train, y_test, mean_ms: float) -> BuiltModel:
    model_dir = out / SYNTHETIC_MODEL
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    centroids = np.stack([X_train[y_train == c].mean(axis=0) for c in range(N_CLASSES)]).astype(np.float32)
    artifact = model_dir / "1" / "centroids.npy"
    with artifact.open("wb") as fh:
        np.save(fh, centroids, allow_pickle=False)
    (model_dir / "1" / "model.py").write_text(_TRITON_PYTHON_MODEL)
    write_config(model_dir / "config.pbtxt", ModelSpec(
        name=SYNTHETIC_MODEL, backend="python", inputs=_DIGITS_INPUTS, outputs=_DIGITS_OUTPUTS,
        instance_count=1, max_queue_size=4096,
        parameters={"service_time_mean_ms": repr(float(mean_ms)), "seed": str(SEED), "tailrace_runner": "synthetic"}))
    from tailrace.endpoints.models.synthetic import nearest_centroid

    accuracy = float(np.mean(nearest_centroid(centroids, X_test)[0] == y_test))
    return _write_metadata(model_dir, artifact, accuracy, int(centroids.size), {
        "description": "nearest-centroid classifier with exponential service time (M/M/1 reference)",
        "service_time_mean_ms": float(mean_ms)})


def build_repository(out: Path, mm1_mean_ms: float = 2.0) -> list[BuiltModel]:
    """Build every model into `out` (a Triton-layout repository) and the held-out data set."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if not mm1_mean_ms > 0:
        raise ValueError(f"--mm1-mean-ms must be > 0, got {mm1_mean_ms}")
    out.mkdir(parents=True, exist_ok=True)
    X_train, X_test, y_train, y_test = load_split()
    (out / DATA_FILE).parent.mkdir(parents=True, exist_ok=True)
    with (out / DATA_FILE).open("wb") as fh:
        np.savez(fh, input=X_test, labels=y_test)  # one array per model input, and the labels

    logreg = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=SEED))
    logreg.fit(X_train, y_train)
    mlp = make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(256, 128), max_iter=400,
                                                         random_state=SEED, early_stopping=False))
    mlp.fit(X_train, y_train)

    built = [
        _build_onnx_model(out, "digits_logreg_fp32", _to_onnx(logreg).SerializeToString(), X_test, y_test, None,
                          "StandardScaler + LogisticRegression, ONNX fp32"),
        _build_onnx_model(out, "digits_mlp_fp32", _to_onnx(mlp).SerializeToString(), X_test, y_test, None,
                          "StandardScaler + MLP(256,128), ONNX fp32"),
    ]
    built.append(_build_onnx_model(out, "digits_mlp_int8", None, X_test, y_test,
                                   out / "digits_mlp_fp32" / "1" / "model.onnx",
                                   "digits_mlp_fp32 with dynamic INT8 weight quantization (onnxruntime)"))
    built.append(_build_synthetic(out, X_train, X_test, y_train, y_test, mm1_mean_ms))
    built += build_zoo(out, out / "digits_mlp_fp32" / "1" / "model.onnx", X_test, y_test, _write_metadata)
    built += build_generative(out, _write_metadata)
    return built


def load_heldout(repository: Path) -> tuple[np.ndarray, np.ndarray]:
    """The held-out inputs and labels the harness sends."""
    path = repository / DATA_FILE
    with np.load(path) as data:
        return data["input"].astype(np.float32), data["labels"].astype(np.int64)


def main(argv: list[str]) -> int:
    """A build as a run starts it: `python -m tailrace.endpoints.models.model_build OPTIONS_JSON`."""
    options = options_from_argv(ModelsBuildOptions, argv, MODELS_BUILD)
    built = build_repository(options.out, options.mm1_mean_ms)
    print(f"built {len(built)} models into {options.out}: {', '.join(m.name for m in built)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
