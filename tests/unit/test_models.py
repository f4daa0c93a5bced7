"""Model builds: deterministic, Triton layout, accuracy recorded, int8 close to fp32."""
from __future__ import annotations

import json

import numpy as np
import onnx

from endpoints.model_build import ALL_MODELS, DATA_FILE, build_repository, load_heldout, onnx_accuracy
from endpoints.model_config import read_config


def test_build_is_deterministic(model_repo, tmp_path):
    again = {m.name: m.sha256 for m in build_repository(tmp_path / "again")}
    first = {name: json.loads((model_repo / name / "metadata.json").read_text())["sha256"] for name in ALL_MODELS}
    assert again == first


def test_triton_layout_and_metadata(model_repo):
    for name in ALL_MODELS:
        spec = read_config(model_repo / name / "config.pbtxt")
        assert spec.name == name
        assert [t.name for t in spec.inputs] == ["input"]
        meta = json.loads((model_repo / name / "metadata.json").read_text())
        assert meta["size_bytes"] == (model_repo / name / meta["artifact"]).stat().st_size
        assert meta["parameters"] > 0 and len(meta["sha256"]) == 64
        assert "onnxruntime" in meta["build_versions"]
    for name in ("digits_logreg_fp32", "digits_mlp_fp32", "digits_mlp_int8"):
        model = onnx.load(str(model_repo / name / "1" / "model.onnx"))
        domains = [o.domain for o in model.opset_import]
        assert len(domains) == len(set(domains)), f"{name}: duplicate opset entries {domains}"
    assert (model_repo / DATA_FILE).exists()


def test_int8_accuracy_close_to_fp32_and_smaller(model_repo):
    X, y = load_heldout(model_repo)
    assert len(X) == len(y) > 500
    fp32 = onnx_accuracy(model_repo / "digits_mlp_fp32" / "1" / "model.onnx", X, y)
    int8 = onnx_accuracy(model_repo / "digits_mlp_int8" / "1" / "model.onnx", X, y)
    logreg = onnx_accuracy(model_repo / "digits_logreg_fp32" / "1" / "model.onnx", X, y)
    assert fp32 > 0.95 and logreg > 0.93
    assert abs(fp32 - int8) <= 0.01
    size = lambda n: (model_repo / n / "1" / "model.onnx").stat().st_size  # noqa: E731
    assert size("digits_mlp_int8") < 0.5 * size("digits_mlp_fp32")
    # int8 changes the MatMul weights: the models are not byte-identical in behaviour
    import onnxruntime as ort
    p = lambda n: ort.InferenceSession(str(model_repo / n / "1" / "model.onnx")).run(["probabilities"], {"input": X})[0]  # noqa
    assert not np.array_equal(p("digits_mlp_fp32"), p("digits_mlp_int8"))
