"""Serve a tailrace model repository on a real Triton Inference Server, through PyTriton.

Runs in its own virtualenv (`.venv-triton`: nvidia-pytriton pins numpy<2), so it imports nothing from
tailrace. Each model of the repository is bound under the same name, with the same inputs and outputs
as the embedded endpoint, to an onnxruntime session on the same ONNX file (`synthetic_mm1` to the same
nearest-centroid + exponential-service-time computation as its Python-backend model.py).

Triton's HTTP, gRPC and metrics servers bind the given address (127.0.0.1 by default); the statistics API
is not restricted; `traceparent` and the x-tailrace-* headers are forwarded into the request parameters.

    .venv-triton/bin/python deploy/triton/serve_pytriton.py --models build/models \
        --http-port 8000 --grpc-port 8001 --metrics-port 8002 [--max-batch 16 --queue-delay-us 200]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

FORWARD_PATTERN = "(traceparent|x-tailrace-.*)"
LOG = logging.getLogger("tailrace.triton")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=Path, required=True, help="tailrace model repository (tailrace models build)")
    p.add_argument("--host", default="127.0.0.1", help="address for HTTP, gRPC and metrics (loopback by default)")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument("--model", action="append", default=[], help="serve only these models (repeatable)")
    p.add_argument("--max-batch", type=int, default=16, help="max_batch_size of every model (>= 1)")
    p.add_argument("--queue-delay-us", type=int, default=0,
                   help="dynamic batcher's max_queue_delay_microseconds; 0 batches only what is already queued")
    p.add_argument("--no-dynamic-batching", action="store_true", help="one request per execution")
    p.add_argument("--instances", type=int, default=1, help="model instances (execution slots) per model")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads per session")
    p.add_argument("--trace-log", type=Path, help="append the trace ID of every request received here")
    p.add_argument("--ready-file", type=Path, help="write {pid, ports, models} here once every model is ready")
    args = p.parse_args(argv)
    if args.max_batch < 1:
        p.error("--max-batch must be >= 1")
    if args.instances < 1:
        p.error("--instances must be >= 1")
    if not (args.models / "_data").is_dir():
        p.error(f"--models {args.models}: not a tailrace model repository (no _data/); run `tailrace models build`")
    return args


class TraceLog:
    """Appends the trace ID of every request Triton forwarded `traceparent` for (one per line), flushed ~1/s."""

    def __init__(self, path: Path | None) -> None:
        self._file = open(path, "a", buffering=1 << 16) if path else None
        self._lock = threading.Lock()
        self._flushed = time.monotonic()

    def record(self, parameters: dict | None) -> None:
        if self._file is None or not parameters:
            return
        traceparent = parameters.get("traceparent")
        if isinstance(traceparent, str) and traceparent.count("-") == 3:
            with self._lock:
                self._file.write(traceparent.split("-")[1] + "\n")
                if time.monotonic() - self._flushed > 1.0:
                    self._file.flush()
                    self._flushed = time.monotonic()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def batched(compute, trace_log: TraceLog):
    """A PyTriton callable: concatenates the requests' `input`, runs `compute`, splits the outputs back."""

    def infer(requests):
        sizes = []
        for request in requests:
            trace_log.record(request.parameters)
            sizes.append(request["input"].shape[0])
        x = requests[0]["input"] if len(requests) == 1 else np.concatenate([r["input"] for r in requests])
        label, probabilities = compute(x.astype(np.float32, copy=False))
        label = np.asarray(label, dtype=np.int64).reshape(-1, 1)
        probabilities = np.asarray(probabilities, dtype=np.float32)
        out, at = [], 0
        for n in sizes:
            out.append({"label": label[at:at + n], "probabilities": probabilities[at:at + n]})
            at += n
        return out

    return infer


def onnx_compute(path: Path, threads: int):
    """X → (label, probabilities) on an onnxruntime session for the ONNX model at `path`."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    output_names = [o.name for o in session.get_outputs()]

    def compute(x: np.ndarray):
        return session.run(output_names, {input_name: x})

    return compute


def synthetic_compute(model_dir: Path):
    """The synthetic M/M/1 model: nearest centroid, then sleep so each execution takes Exp(mean) in total."""
    config_text = (model_dir / "config.pbtxt").read_text()
    mean_s = float(_pbtxt_parameter(config_text, "service_time_mean_ms", "2")) / 1000.0
    rng = np.random.default_rng(int(_pbtxt_parameter(config_text, "seed", "0")))
    centroids = np.load(model_dir / "1" / "centroids.npy")

    def compute(x: np.ndarray):
        start = time.perf_counter()
        d = ((x[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        label = d.argmin(axis=1).astype(np.int64)
        proba = np.exp(-(d - d.min(axis=1, keepdims=True)) / 1000.0).astype(np.float32)
        proba /= proba.sum(axis=1, keepdims=True)
        remaining = rng.exponential(mean_s) - (time.perf_counter() - start)
        if remaining > 0:
            time.sleep(remaining)
        return label, proba

    return compute


def _pbtxt_parameter(text: str, key: str, default: str) -> str:
    """A string parameter of a config.pbtxt (`parameters { key: "k" value { string_value: "v" } }`)."""
    marker = f'key: "{key}"'
    at = text.find(marker)
    if at < 0:
        return default
    start = text.find('string_value: "', at)
    if start < 0:
        return default
    start += len('string_value: "')
    return text[start:text.index('"', start)]


def discover_models(root: Path, only: list[str]) -> dict[str, Path]:
    """Model name → model directory, for every model the repository holds (or the `only` subset)."""
    found = {d.name: d for d in sorted(root.iterdir()) if d.is_dir() and (d / "config.pbtxt").exists()}
    missing = [m for m in only if m not in found]
    if missing:
        raise SystemExit(f"--model: not in {root}: {', '.join(missing)} (has {', '.join(found)})")
    return {m: found[m] for m in (only or found)}


def model_config(args: argparse.Namespace) -> ModelConfig:
    batcher = None if args.no_dynamic_batching else DynamicBatcher(max_queue_delay_microseconds=args.queue_delay_us)
    return ModelConfig(batching=True, max_batch_size=args.max_batch, batcher=batcher)


def bind_models(triton: Triton, models: dict[str, Path], args: argparse.Namespace, trace_log: TraceLog) -> None:
    for name, model_dir in models.items():
        onnx_path = model_dir / "1" / "model.onnx"
        if onnx_path.exists():
            functions = [batched(onnx_compute(onnx_path, args.threads), trace_log) for _ in range(args.instances)]
        elif (model_dir / "1" / "centroids.npy").exists():
            functions = [batched(synthetic_compute(model_dir), trace_log)]  # one slot: M/M/1 by construction
        else:
            LOG.warning("skipping %s: neither 1/model.onnx nor a synthetic model", name)
            continue
        triton.bind(model_name=name, infer_func=functions,
                    inputs=[Tensor(name="input", dtype=np.float32, shape=(64,))],
                    outputs=[Tensor(name="label", dtype=np.int64, shape=(1,)),
                             Tensor(name="probabilities", dtype=np.float32, shape=(10,))],
                    config=model_config(args), strict=True)
        LOG.info("bound %s (%d instance(s), max_batch %d)", name, len(functions), args.max_batch)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse_args(argv)
    models = discover_models(args.models, args.model)
    config = TritonConfig(http_address=args.host, http_port=args.http_port, grpc_address=args.host,
                          grpc_port=args.grpc_port, metrics_address=args.host, metrics_port=args.metrics_port,
                          allow_metrics=True, allow_cpu_metrics=True, allow_gpu_metrics=False,
                          http_header_forward_pattern=FORWARD_PATTERN, grpc_header_forward_pattern=FORWARD_PATTERN,
                          log_verbose=0)
    trace_log = TraceLog(args.trace_log)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # An empty list of restricted endpoints lifts PyTriton's default token on statistics & co.
    with Triton(config=config, security_config=TritonSecurityConfig(restricted_endpoints=[])) as triton:
        bind_models(triton, models, args, trace_log)
        triton.run()
        if args.ready_file:
            args.ready_file.write_text(json.dumps({
                "pid": os.getpid(), "http_port": args.http_port, "grpc_port": args.grpc_port,
                "metrics_port": args.metrics_port, "models": list(models)}))
        LOG.info("Triton ready on %s: HTTP %d, gRPC %d, metrics %d", args.host, args.http_port, args.grpc_port,
                 args.metrics_port)
        while not stop.wait(0.5):
            if not triton.is_alive():
                LOG.error("tritonserver exited")
                trace_log.close()
                return 3
    trace_log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
