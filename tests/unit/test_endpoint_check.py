"""What differs between the request tailrace sends and the model's metadata, one line each."""
from __future__ import annotations

from harness.orchestration.endpoint_check import ModelInfo, Tensor, mismatches

SENDS = [Tensor("input", "FP32", (1, 64))]


def _model(inputs, outputs=(Tensor("label", "INT64", (-1,)),), ready=True) -> ModelInfo:
    return ModelInfo(name="m", inputs=list(inputs), outputs=list(outputs), ready=ready)


def test_a_model_that_takes_the_request_has_no_mismatch():
    assert mismatches(_model([Tensor("input", "FP32", (-1, 64))]), SENDS, ["label"]) == []


def test_each_difference_is_named():
    resnet = _model([Tensor("pixel_values", "FP32", (-1, 3, 224, 224))], [Tensor("logits", "FP32", (-1, 1000))],
                    ready=False)
    assert mismatches(resnet, SENDS, ["label"]) == [
        "the model is not ready",
        "input 'input': the model has no such input (its inputs: pixel_values FP32 [-1, 3, 224, 224])",
        "input 'pixel_values': the model needs it and tailrace does not send it",
        "output 'label': the model has no such output (its outputs: logits FP32 [-1, 1000])"]
    wrong = _model([Tensor("input", "FP16", (-1, 32))])
    assert mismatches(wrong, SENDS, ["label"]) == ["input 'input': tailrace sends FP32, the model takes FP16",
                                                   "input 'input': tailrace sends shape [1, 64], the model takes "
                                                   "[-1, 32]"]


def test_an_unknown_row_width_is_not_a_mismatch():
    assert mismatches(_model([Tensor("input", "FP32", (-1, 64))]), [Tensor("input", "FP32", (1, -1))], ["label"]) == []
