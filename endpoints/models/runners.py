"""Model runners: what executes one request's tensors inside an execution slot."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import numpy as np

from tailrace.endpoints.models.model_config import ModelSpec
from tailrace.endpoints.models.synthetic import nearest_centroid


class Runner(Protocol):
    """Runs one inference: input arrays by name → output arrays by name."""

    compute_only: bool  # short CPU work that may run inline on the event loop (else: on a slot thread)

    def run(self, inputs: dict[str, np.ndarray], started_ns: int | None = None) -> dict[str, np.ndarray]:
        """`started_ns`: perf_counter_ns() when the request took its slot."""


class OnnxRunner:
    """An onnxruntime session on `1/model.onnx`; one intra-op thread so slots map to cores."""

    compute_only = True  # short CPU work: may run inline on the event loop

    def __init__(self, spec: ModelSpec) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(spec.directory / "1" / "model.onnx"), sess_options=opts,
                                             providers=["CPUExecutionProvider"])
        self._outputs = [o.name for o in spec.outputs]
        self._strings = {t.name for t in spec.inputs if t.datatype == "BYTES"}

    def run(self, inputs: dict[str, np.ndarray], started_ns: int | None = None) -> dict[str, np.ndarray]:
        for name in self._strings:  # ONNX string tensors hold str; KServe BYTES hold bytes
            inputs[name] = np.vectorize(_text, otypes=[object])(inputs[name])
        return dict(zip(self._outputs, self._session.run(self._outputs, inputs)))


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class SyntheticRunner:
    """Nearest centroid, then sleep so the whole service time is Exp(mean) (seeded)."""

    compute_only = False  # sleeps: must run on a thread

    def __init__(self, spec: ModelSpec, mean_ms: float | None = None) -> None:
        self.mean_s = (mean_ms if mean_ms is not None else float(spec.parameters.get("service_time_mean_ms", 2))) / 1e3
        self._rng = np.random.default_rng(int(spec.parameters.get("seed", 0)))
        self._centroids = np.load(Path(spec.directory) / "1" / "centroids.npy")
        self._overshoot_ns = sleep_overshoot_ns()
        self._max_overshoot_ns = int(self.mean_s * 1e9 / 4)  # a stall must not turn into a string of 0-length jobs

    def run(self, inputs: dict[str, np.ndarray], started_ns: int | None = None) -> dict[str, np.ndarray]:
        """The service time runs from the slot grant (hand-off to this thread included), so the slot is
        held for Exp(mean) in total. Sleep's overshoot — waking up, then waiting for the GIL, longer when
        the server is busy — is compensated by a running estimate, so the mean holds under load too."""
        start = started_ns if started_ns is not None else time.perf_counter_ns()
        labels, scores = nearest_centroid(self._centroids, inputs["input"])
        end = start + int(self._rng.exponential(self.mean_s) * 1e9)
        remaining = end - time.perf_counter_ns() - self._overshoot_ns
        if remaining > 0:
            time.sleep(remaining / 1e9)
            late = time.perf_counter_ns() - end  # > 0: this sleep overshot more than the estimate
            self._overshoot_ns = min(self._max_overshoot_ns, max(0, self._overshoot_ns + late // 16))
        return {"label": labels, "probabilities": scores}


def sleep_overshoot_ns(trials: int = 30) -> int:
    """Median extra time time.sleep() takes over what it is asked for (~50–100 µs on Linux)."""
    extra = []
    for _ in range(trials):
        t0 = time.perf_counter_ns()
        time.sleep(0.0002)
        extra.append(time.perf_counter_ns() - t0 - 200_000)
    return max(0, int(np.median(extra)))


def load_runner(spec: ModelSpec, service_time_mean_ms: float | None = None) -> Runner:
    """The runner for a model directory: ONNX for onnxruntime models, synthetic where the config says so."""
    if spec.parameters.get("tailrace_runner") == "synthetic":
        return SyntheticRunner(spec, service_time_mean_ms)
    if spec.backend in ("onnxruntime", "onnxruntime_onnx"):
        return OnnxRunner(spec)
    raise ValueError(f"{spec.directory}: backend {spec.backend!r} is not supported by the embedded server")
