"""Models whose shapes serving engineers meet, built deterministically without downloads, each with a data
file in one of the formats tailrace reads (so each is load-tested the way a user's own model would be):

- `image_cnn_fp32`: a small CNN, FP32 `[N, 3, 224, 224]` (~600 kB per request) → `logits` `[N, 10]`, `label`;
  data `_data/images.npz` (16 images; labels are the model's own answers, so a request that arrives
  altered — a wrong byte order, a wrong layout — is counted wrong);
- `text_tfidf`: TF-IDF + logistic regression (scikit-learn → skl2onnx) with a BYTES (string) input `text`
  `[N, 1]` on a generated two-class corpus; data `_data/text.jsonl` with labels (accuracy checked);
- `tokens_int64`: two INT64 inputs `input_ids` and `attention_mask` `[N, -1]` (dynamic sequence length:
  needs `shapes`), a masked mean of embeddings → `logits` `[N, 2]`; data `_data/tokens.json` in
  perf_analyzer's input-data format with `validation_data`;
- `digits_mlp_fp16`: the digits MLP with FP16 input and probabilities (half the bytes on the wire; it
  computes in FP32 inside, since onnxruntime's CPU kernels for the scaler are FP32).

Weights come from a seeded generator; the ONNX graphs are written with onnx.helper.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

from tailrace.contract.tensors import TensorSpec
from tailrace.endpoints.models.model_config import ModelSpec, write_config
from tailrace.endpoints.models.onnx_tools import dedupe_opsets, onnx_parameter_count

SEED = 20261122
IMAGE_SHAPE = (3, 224, 224)
VOCAB, EMBED, SEQ_LEN = 1000, 16, 32
ZOO_MODELS = ("image_cnn_fp32", "text_tfidf", "tokens_int64", "digits_mlp_fp16")
IMAGES_FILE = Path("_data") / "images.npz"
TEXT_FILE = Path("_data") / "text.jsonl"
TOKENS_FILE = Path("_data") / "tokens.json"
OPSET = 17


def _model(nodes, inputs, outputs, initializers, name: str):
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tailrace")
    model.ir_version = 8
    return model


def _init(name: str, arr: np.ndarray):
    from onnx import numpy_helper

    return numpy_helper.from_array(arr, name)


def image_cnn(rng: np.random.Generator):
    """Conv(3→8, 7×7 /4) → ReLU → Conv(8→16, 3×3 /2) → ReLU → global average pool → Gemm(16→10), ArgMax."""
    from onnx import TensorProto, helper

    w1 = (rng.normal(0, 0.1, (8, 3, 7, 7))).astype(np.float32)
    w2 = (rng.normal(0, 0.2, (16, 8, 3, 3))).astype(np.float32)
    w3 = (rng.normal(0, 0.5, (10, 16))).astype(np.float32)
    b3 = (rng.normal(0, 0.1, 10)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["image", "w1"], ["c1"], strides=[4, 4], pads=[3, 3, 3, 3]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"]),
             helper.make_node("Gemm", ["flat", "w3", "b3"], ["logits"], transB=1),
             helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0)]
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", *IMAGE_SHAPE])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10]),
               helper.make_tensor_value_info("label", TensorProto.INT64, ["N"])]
    return _model(nodes, inputs, outputs, [_init("w1", w1), _init("w2", w2), _init("w3", w3), _init("b3", b3)],
                  "image_cnn")


def tokens_model(rng: np.random.Generator):
    """Embedding lookup, masked mean over the sequence, a linear layer → logits [N, 2]."""
    from onnx import TensorProto, helper

    emb = rng.normal(0, 1, (VOCAB, EMBED)).astype(np.float32)
    w = rng.normal(0, 1, (EMBED, 2)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["vectors"]),
             helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["mask", "axis2"], ["mask3"]),
             helper.make_node("Mul", ["vectors", "mask3"], ["masked"]),
             helper.make_node("ReduceSum", ["masked", "axis1"], ["summed"], keepdims=0),
             helper.make_node("ReduceSum", ["mask3", "axis1"], ["count"], keepdims=0),
             helper.make_node("Max", ["count", "one"], ["count1"]),
             helper.make_node("Div", ["summed", "count1"], ["mean"]),
             helper.make_node("MatMul", ["mean", "w"], ["logits"])]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", "S"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["N", "S"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2])]
    inits = [_init("emb", emb), _init("w", w), _init("axis1", np.array([1], np.int64)),
             _init("axis2", np.array([2], np.int64)), _init("one", np.array([1.0], np.float32))]
    return _model(nodes, inputs, outputs, inits, "tokens")


def fp16_io(fp32_model):
    """The same graph with an FP16 input (cast to FP32 first) and FP16 probabilities (cast last)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.ModelProto()
    model.CopyFrom(fp32_model)
    g = model.graph
    for node in g.node:
        node.input[:] = ["input_fp32" if n == "input" else n for n in node.input]
        node.output[:] = ["probabilities_fp32" if n == "probabilities" else n for n in node.output]
    g.node.insert(0, helper.make_node("Cast", ["input"], ["input_fp32"], to=TensorProto.FLOAT))
    g.node.append(helper.make_node("Cast", ["probabilities_fp32"], ["probabilities"], to=TensorProto.FLOAT16))
    g.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    for out in g.output:
        if out.name == "probabilities":
            out.type.tensor_type.elem_type = TensorProto.FLOAT16
    return model


CLASS_WORDS = (("dull", "slow", "boring", "weak", "flat", "tedious", "bland", "poor"),
               ("great", "sharp", "moving", "fresh", "bright", "gripping", "superb", "fine"))
COMMON_WORDS = ("film", "plot", "cast", "story", "scene", "score", "ending", "pace", "the", "a", "and", "with")


def corpus(rng: np.random.Generator, n: int) -> tuple[list[str], np.ndarray]:
    """`n` short reviews: common words and a few words of their class (with 10% of the other's as noise)."""
    labels = rng.integers(0, 2, n)
    texts = []
    for y in labels:
        words = list(rng.choice(COMMON_WORDS, 6)) + list(rng.choice(CLASS_WORDS[y], 2))
        if rng.random() < 0.1:
            words.append(str(rng.choice(CLASS_WORDS[1 - y])))
        rng.shuffle(words)
        texts.append(" ".join(words))
    return texts, labels.astype(np.int64)


def text_classifier(texts: list[str], labels: np.ndarray):
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    pipe = make_pipeline(TfidfVectorizer(lowercase=False), LogisticRegression(max_iter=1000, random_state=SEED))
    pipe.fit(texts, labels)  # lowercase=False: onnxruntime lowercases through a locale (en_US) hosts may lack
    onx = to_onnx(pipe, initial_types=[("text", StringTensorType([None, 1]))],
                  options={id(pipe.steps[-1][1]): {"zipmap": False}}, target_opset=OPSET)
    return dedupe_opsets(onx)


def _session(model):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _write(out: Path, name: str, model, spec: ModelSpec) -> Path:
    model_dir = out / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    artifact = model_dir / "1" / "model.onnx"
    artifact.write_bytes(model.SerializeToString())
    write_config(model_dir / "config.pbtxt", spec)
    return artifact


def build_zoo(out: Path, digits_mlp: Path, X_test: np.ndarray, y_test: np.ndarray, write_metadata) -> list:
    """Build the zoo's models and data files into the repository `out`; `write_metadata(model_dir, artifact,
    accuracy, parameters, extra)` records each (endpoints/models/model_build.py)."""
    import onnx

    rng = np.random.default_rng(SEED)
    built = []

    cnn = image_cnn(rng)
    images = rng.uniform(0, 1, (16, *IMAGE_SHAPE)).astype(np.float32)
    labels = _session(cnn).run(["label"], {"image": images})[0]
    artifact = _write(out, "image_cnn_fp32", cnn, ModelSpec(
        name="image_cnn_fp32", backend="onnxruntime", max_batch_size=8,
        inputs=(TensorSpec("image", "FP32", (-1, *IMAGE_SHAPE)),),
        outputs=(TensorSpec("logits", "FP32", (-1, 10)), TensorSpec("label", "INT64", (-1,))), max_queue_size=256))
    with (out / IMAGES_FILE).open("wb") as fh:
        np.savez(fh, image=images, labels=labels)
    built.append(write_metadata(out / "image_cnn_fp32", artifact, 1.0, onnx_parameter_count(artifact), {
        "description": "small CNN on 3×224×224 FP32 images (~600 kB per request); data _data/images.npz, labels "
                       "are the model's own answers", "dataset": str(IMAGES_FILE)}))

    texts, text_labels = corpus(rng, 600)
    text = text_classifier(texts[:400], text_labels[:400])
    predicted = _session(text).run(["label"], {"text": np.array(texts[400:], dtype=object).reshape(-1, 1)})[0]
    artifact = _write(out, "text_tfidf", text, ModelSpec(
        name="text_tfidf", backend="onnxruntime", max_batch_size=8, inputs=(TensorSpec("text", "BYTES", (-1, 1)),),
        outputs=(TensorSpec("label", "INT64", (-1,)), TensorSpec("probabilities", "FP32", (-1, 2))),
        max_queue_size=256))
    (out / TEXT_FILE).write_text("".join(json.dumps({"text": [t], "labels": int(y)}) + "\n"
                                         for t, y in zip(texts[400:], text_labels[400:])))
    built.append(write_metadata(out / "text_tfidf", artifact, float(np.mean(predicted == text_labels[400:])),
                                onnx_parameter_count(artifact), {
        "description": "TF-IDF + logistic regression on a BYTES (string) input; data _data/text.jsonl",
        "dataset": str(TEXT_FILE)}))

    tokens = tokens_model(rng)
    artifact = _write(out, "tokens_int64", tokens, ModelSpec(
        name="tokens_int64", backend="onnxruntime", max_batch_size=8,
        inputs=(TensorSpec("input_ids", "INT64", (-1, -1)), TensorSpec("attention_mask", "INT64", (-1, -1))),
        outputs=(TensorSpec("logits", "FP32", (-1, 2)),), max_queue_size=256))
    (out / TOKENS_FILE).write_text(json.dumps(token_data(rng, _session(tokens)), indent=1))
    built.append(write_metadata(out / "tokens_int64", artifact, 1.0, onnx_parameter_count(artifact), {
        "description": f"two INT64 inputs with a dynamic sequence length (use shapes, e.g. [{SEQ_LEN}]); data "
                       f"_data/tokens.json in perf_analyzer's format with validation_data",
        "dataset": str(TOKENS_FILE)}))

    fp16 = fp16_io(onnx.load(str(digits_mlp)))
    fp16_labels = _session(fp16).run(["label"], {"input": X_test.astype(np.float16)})[0]
    artifact = _write(out, "digits_mlp_fp16", fp16, ModelSpec(
        name="digits_mlp_fp16", backend="onnxruntime", inputs=(TensorSpec("input", "FP16", (-1, 64)),),
        outputs=(TensorSpec("label", "INT64", (-1,)), TensorSpec("probabilities", "FP16", (-1, 10))),
        max_queue_size=256))
    built.append(write_metadata(out / "digits_mlp_fp16", artifact, float(np.mean(fp16_labels == y_test)),
                                onnx_parameter_count(artifact), {
        "description": "digits_mlp_fp32 with FP16 input and probabilities (computes in FP32 inside)"}))
    return built


def token_data(rng: np.random.Generator, session, n: int = 8) -> dict:
    """perf_analyzer input-data for tokens_int64: `content` + `shape` and `b64` forms, and validation_data."""
    data, validation = [], []
    for i in range(n):
        ids = rng.integers(0, VOCAB, SEQ_LEN).astype(np.int64)
        mask = (np.arange(SEQ_LEN) < rng.integers(SEQ_LEN // 2, SEQ_LEN + 1)).astype(np.int64)
        entry = {"input_ids": {"content": ids.tolist(), "shape": [SEQ_LEN]},
                 "attention_mask": {"content": mask.tolist(), "shape": [SEQ_LEN]}}
        if i % 2:
            entry["input_ids"] = {"b64": base64.b64encode(ids.tobytes()).decode(), "shape": [SEQ_LEN]}
        data.append(entry)
        (logits,) = session.run(["logits"], {"input_ids": ids[None], "attention_mask": mask[None]})
        validation.append({"logits": [round(float(v), 6) for v in logits.reshape(-1)]})
    return {"data": data, "validation_data": validation}
