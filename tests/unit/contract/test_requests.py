"""The request an endpoint is sent: resolved from the model's metadata and the profile, its data read and
checked, its answers decoded and scored."""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from tailrace.contract.profile import Endpoint
from tailrace.contract.requests import RequestSpecError, resolve_request
from tailrace.contract.tensors import TensorSpec
from tailrace.harness.client.payloads import AnswerCheck, Payloads, batch_arrays, decode_http_outputs, http_body
from tailrace.harness.client.request_data import DataError, load_samples

DIGITS_IN = [TensorSpec("input", "FP32", (-1, 64))]
DIGITS_OUT = [TensorSpec("label", "INT64", (-1,)), TensorSpec("probabilities", "FP32", (-1, 10))]
BERT_IN = [TensorSpec("input_ids", "INT64", (-1, -1)), TensorSpec("attention_mask", "INT64", (-1, -1))]


def endpoint(**fields) -> Endpoint:
    return Endpoint(name="e", url="http://127.0.0.1:1", protocol="kserve-http", model="m", **fields)


def test_the_request_comes_from_the_metadata_with_the_batch_dimension_left_out():
    spec = resolve_request(endpoint(batch_size=4, outputs=["label"]), DIGITS_IN, DIGITS_OUT, 16, 1, "server")
    assert spec.batched and spec.batch_size == 4 and spec.outputs == ["label"]
    assert [(i.name, i.datatype, i.shape) for i in spec.inputs] == [("input", "FP32", [64])]
    assert spec.input_shape(spec.inputs[0]) == [4, 64] and spec.output_datatypes == {"label": "INT64"}


def test_without_a_config_a_leading_dynamic_dimension_on_every_input_is_the_batch():
    assert resolve_request(endpoint(), DIGITS_IN, DIGITS_OUT, None, 1, "metadata").batched
    fixed = [TensorSpec("x", "FP32", (3, 224, 224))]
    assert not resolve_request(endpoint(), fixed, [], None, 1, "metadata").batched
    assert resolve_request(endpoint(), DIGITS_IN, DIGITS_OUT, 0, 1, "config").batched  # explicit: max_batch_size 0


def test_shapes_fix_dynamic_dimensions_and_every_misfit_is_named():
    spec = resolve_request(endpoint(shapes={"input_ids": [128], "attention_mask": [128]}), BERT_IN, [], None, 1, "m")
    assert [i.shape for i in spec.inputs] == [[128], [128]]
    with pytest.raises(RequestSpecError) as err:
        resolve_request(endpoint(shapes={"input_ids": [128, 2], "token_type_ids": [3]}, outputs=["logits"],
                                 check={"output": "pooled"}), BERT_IN, [TensorSpec("logits", "FP32", (-1, 2))],
                        None, 1, "m")
    message = str(err.value)
    assert "shapes.token_type_ids: the model has no input 'token_type_ids'" in message
    assert "shapes.input_ids: [128, 2] does not fit the model's [-1]" in message
    assert "check.output: 'pooled' is not among the outputs asked for (logits)" in message
    with pytest.raises(RequestSpecError, match="batch_size 8: the model has no batch dimension"):
        resolve_request(endpoint(batch_size=8), [TensorSpec("x", "FP32", (3,))], [], 0, 1, "config")
    with pytest.raises(RequestSpecError, match="exceeds the model's max_batch_size 4"):
        resolve_request(endpoint(batch_size=8), DIGITS_IN, DIGITS_OUT, 4, 1, "config")


def test_random_data_is_seeded_bounded_and_needs_concrete_shapes():
    ep = endpoint(shapes={"input_ids": [16], "attention_mask": [16]}, ranges={"input_ids": [0, 30522]})
    spec = resolve_request(ep, BERT_IN, [], None, 1, "m")
    a = load_samples("random", ep, spec, seed=7, max_samples=50, max_bytes=1e9)
    b = load_samples("random", ep, spec, seed=7, max_samples=50, max_bytes=1e9)
    assert len(a) == 50 and all((x == y).all() for x, y in zip(a.inputs["input_ids"], b.inputs["input_ids"]))
    ids = np.stack(a.inputs["input_ids"])
    assert ids.dtype == np.int64 and ids.shape == (50, 16) and ids.min() >= 0 and ids.max() < 30522
    assert len(load_samples("random", ep, spec, seed=7, max_samples=50, max_bytes=16 * 8 * 2 * 10)) == 10
    with pytest.raises(DataError, match=r"input 'input_ids' has a dynamic shape \[-1\]; give it with shapes"):
        load_samples("random", endpoint(), resolve_request(endpoint(), BERT_IN, [], None, 1, "m"), 0, 5, 1e9)


def test_npz_arrays_must_match_the_inputs_by_name(tmp_path):
    ep = endpoint(check={"output": "label"})
    spec = resolve_request(ep, DIGITS_IN, DIGITS_OUT, None, 1, "m")
    good = tmp_path / "d.npz"
    np.savez(good, input=np.ones((5, 64), np.float32), labels=np.arange(5))
    samples = load_samples(str(good), ep, spec, 0, 100, 1e9)
    assert len(samples) == 5 and samples.labels.tolist() == [0, 1, 2, 3, 4]
    wrong = tmp_path / "w.npz"
    np.savez(wrong, pixels=np.ones((5, 32), np.float32), other=np.ones(5))
    with pytest.raises(DataError, match=r"input 'input': the model needs it and the file has no such array"):
        load_samples(str(wrong), endpoint(), spec, 0, 100, 1e9)
    narrow = tmp_path / "n.npz"
    np.savez(narrow, input=np.ones((5, 32), np.float32))
    with pytest.raises(DataError, match=r"sample 0, input 'input': shape \[32\] does not fit the model's \[64\]"):
        load_samples(str(narrow), endpoint(), spec, 0, 100, 1e9)
    legacy = tmp_path / "old.npz"  # the digits file of an older model build: X and y
    np.savez(legacy, X=np.ones((3, 64), np.float32), y=np.array([7, 8, 9]))
    assert load_samples(str(legacy), ep, spec, 0, 100, 1e9).labels.tolist() == [7, 8, 9]
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(good.read_bytes()[:200])  # a truncated copy
    with pytest.raises(DataError, match="damaged.npz: not a readable .npz"):
        load_samples(str(damaged), endpoint(), spec, 0, 100, 1e9)
    unlabelled = tmp_path / "u.npz"
    np.savez(unlabelled, input=np.ones((2, 64), np.float32))
    with pytest.raises(DataError, match="check.kind 'label' needs labels"):
        load_samples(str(unlabelled), ep, spec, 0, 100, 1e9)


def test_a_perf_analyzer_input_data_file_is_read_unchanged(tmp_path):
    ids = np.arange(8, dtype=np.int64)
    doc = {"data": [
        {"input_ids": {"content": ids.tolist(), "shape": [8]}, "attention_mask": [1] * 8},
        {"input_ids": {"b64": base64.b64encode(ids[::-1].tobytes()).decode(), "shape": [8]},
         "attention_mask": {"content": [1] * 8, "shape": [8]}}],
        "validation_data": [{"logits": [0.5, -0.5]}, {"logits": {"content": [1.0, 2.0]}}]}
    path = tmp_path / "input.json"
    path.write_text(json.dumps(doc))
    ep = endpoint(check={"kind": "validation"})
    spec = resolve_request(ep, BERT_IN, [TensorSpec("logits", "FP32", (-1, 2))], None, 1, "m")
    samples = load_samples(str(path), ep, spec, 0, 100, 1e9)
    assert len(samples) == 2 and samples.inputs["input_ids"][1].tolist() == ids[::-1].tolist()
    assert [e.tolist() for e in samples.expected["logits"]] == [[0.5, -0.5], [1.0, 2.0]]
    doc["data"][1]["token_type_ids"] = [0] * 8
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError, match="sample 1, input 'token_type_ids': the model has no such input"):
        load_samples(str(path), ep, spec, 0, 100, 1e9)


def test_jsonl_and_a_directory_of_files(tmp_path):
    text_in = [TensorSpec("text", "BYTES", (-1, 1))]
    ep = endpoint(check={"output": "label"})
    spec = resolve_request(ep, text_in, [TensorSpec("label", "INT64", (-1,))], None, 1, "m")
    lines = tmp_path / "d.jsonl"
    lines.write_text('{"text": ["good film"], "labels": 1}\n{"text": ["dull"], "labels": 0}\n')
    samples = load_samples(str(lines), ep, spec, 0, 100, 1e9)
    assert samples.inputs["text"][0].tolist() == [b"good film"] and samples.labels.tolist() == [1, 0]
    for cls, name in (("neg", "a.txt"), ("pos", "b.txt"), ("pos", "c.txt")):
        (tmp_path / "files" / cls).mkdir(parents=True, exist_ok=True)
        (tmp_path / "files" / cls / name).write_bytes(name.encode())
    files = load_samples(str(tmp_path / "files"), ep, spec, 0, 100, 1e9)
    assert [s.tolist() for s in files.inputs["text"]] == [[b"a.txt"], [b"b.txt"], [b"c.txt"]]
    assert files.labels.tolist() == [0, 1, 1]
    with pytest.raises(DataError, match="a directory feeds a model with one BYTES input"):
        load_samples(str(tmp_path / "files"), endpoint(), resolve_request(endpoint(), DIGITS_IN, [], None, 1, "m"),
                     0, 100, 1e9)


def test_http_bodies_go_binary_for_large_and_bytes_tensors_and_answers_are_scored(tmp_path):
    ep = endpoint(batch_size=2, check={"output": "label"})
    spec = resolve_request(ep, DIGITS_IN, DIGITS_OUT, 8, 1, "m")
    path = tmp_path / "d.npz"
    np.savez(path, input=np.arange(3 * 64, dtype=np.float32).reshape(3, 64), labels=np.array([4, 5, 6]))
    samples = load_samples(str(path), ep, spec, 0, 100, 1e9)
    body, header_length = http_body(batch_arrays(samples, spec, 2), spec, "auto")  # 2 × 64 floats: 512 B, JSON
    assert header_length is None and json.loads(body)["inputs"][0]["shape"] == [2, 64]
    body, header_length = http_body(batch_arrays(samples, spec, 2), spec, True)
    header = json.loads(body[:header_length])
    assert header["inputs"][0]["parameters"]["binary_data_size"] == 512 and len(body) == header_length + 512
    rows = np.frombuffer(body[header_length:], np.float32).reshape(2, 64)
    assert rows[0, 0] == 128 and rows[1, 0] == 0  # samples 2 and 0: the batch wraps around
    payloads = Payloads.build(samples, spec, 1, lambda arrays: None)
    assert payloads.first_row(4) == 1
    response = json.dumps({"outputs": [{"name": "label", "datatype": "INT64", "shape": [2], "data": [6, 9]}],
                           "parameters": {"queue_ns": 5}}).encode()
    outputs, params = decode_http_outputs(response, None, ("label",))
    check = AnswerCheck(ep.check, samples, spec.batched)
    assert check.score(outputs, 2, 2) == (1, 6) and params == {"queue_ns": 5}  # 6 is right, 9 is not (label 4)
    assert AnswerCheck(None, samples, True).score(outputs, 2, 2) == (-1, -1)  # nothing checked
