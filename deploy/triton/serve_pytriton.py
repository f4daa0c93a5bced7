"""Serve a tailrace model repository on a real Triton Inference Server, through PyTriton.

Runs in its own virtualenv (`.venv-triton`: nvidia-pytriton pins numpy<2), so it imports nothing from
tailrace. Each ONNX model of the repository is bound under the same name to an onnxruntime session on the
same ONNX file, with the inputs and outputs its graph declares (any number, any datatype; ONNX strings are
BYTES); a model whose every input and output has a dynamic first dimension is batched (dynamic batching up to
--max-batch), others take one request at a time. `synthetic_mm1` is bound to the same nearest-centroid +
exponential-service-time computation as its Python-backend model.py.

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
# PyTriton's own teardown once asked to stop: it waits up to 30 s for tritonserver, and once (CI, beside a vLLM start)
# hung past tailrace's 20 s, then past SIGKILL's 5 s. Bounded here, under tailrace's wait: the program exits, and
# tailrace's stop removes whatever of its children is left (harness/services/triton_server.py stop_triton).
TEARDOWN_S = 15.0


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


def batched(compute, input_names: list[str], output_names: list[str], trace_log: TraceLog):
    """A PyTriton callable: concatenates the requests' inputs along the batch dimension, runs `compute`,
    splits the outputs back (rank-1 outputs as [n, 1], PyTriton's shape for a per-row scalar)."""

    def infer(requests):
        sizes = []
        for request in requests:
            trace_log.record(request.parameters)
            sizes.append(request[input_names[0]].shape[0])
        feed = {n: requests[0][n] if len(requests) == 1 else np.concatenate([r[n] for r in requests])
                for n in input_names}
        results = [np.asarray(r) for r in compute(feed)]
        results = [r.reshape(-1, 1) if r.ndim == 1 else r for r in results]
        out, at = [], 0
        for n in sizes:
            out.append({name: r[at:at + n] for name, r in zip(output_names, results)})
            at += n
        return out

    return infer


def unbatched(compute, input_names: list[str], output_names: list[str], trace_log: TraceLog):
    """A PyTriton callable for a model without a batch dimension: one request per execution."""

    def infer(requests):
        out = []
        for request in requests:
            trace_log.record(request.parameters)
            out.append(dict(zip(output_names, (np.asarray(r) for r in compute({n: request[n] for n in input_names})))))
        return out

    return infer


ORT_TO_NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
                "tensor(int8)": np.int8, "tensor(int16)": np.int16, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
                "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32,
                "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_, "tensor(string)": np.bytes_}


def _dims(shape) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else -1 for d in shape)


def onnx_model(path: Path, threads: int):
    """(compute, inputs, outputs, batched) for the ONNX model at `path`: `compute(feed) → outputs` on an
    onnxruntime session; the tensors as (name, numpy dtype, shape with -1 for dynamic dimensions)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    inputs = [(i.name, ORT_TO_NUMPY[i.type], _dims(i.shape)) for i in session.get_inputs()]
    outputs = [(o.name, ORT_TO_NUMPY[o.type], _dims(o.shape)) for o in session.get_outputs()]
    strings_in = {n for n, dtype, _ in inputs if dtype is np.bytes_}
    output_names = [n for n, _, _ in outputs]

    def compute(feed: dict[str, np.ndarray]):
        for n in strings_in:  # Triton hands BYTES as bytes; ONNX string tensors hold str
            feed[n] = np.vectorize(lambda b: b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b),
                                   otypes=[object])(feed[n])
        results = session.run(output_names, feed)
        # strings back to bytes; numbers to the declared type (onnxruntime may hand int64 as numpy's longlong,
        # which PyTriton's output check does not take for int64)
        return [np.vectorize(lambda v: v.encode(), otypes=[object])(r) if r.dtype == object else r.astype(dtype)
                for r, (_, dtype, _) in zip(results, outputs)]

    is_batched = all(shape and shape[0] == -1 for _, _, shape in inputs + outputs)
    return compute, inputs, outputs, is_batched


def synthetic_compute(model_dir: Path):
    """The synthetic M/M/1 model (feed {input} → [label, probabilities]): nearest centroid, then sleep so each
    execution takes Exp(mean) in total."""
    config_text = (model_dir / "config.pbtxt").read_text()
    mean_s = float(_pbtxt_parameter(config_text, "service_time_mean_ms", "2")) / 1000.0
    rng = np.random.default_rng(int(_pbtxt_parameter(config_text, "seed", "0")))
    centroids = np.load(model_dir / "1" / "centroids.npy")

    def compute(feed: dict[str, np.ndarray]):
        start = time.perf_counter()
        x = feed["input"].astype(np.float32, copy=False)
        d = ((x[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        label = d.argmin(axis=1).astype(np.int64)
        proba = np.exp(-(d - d.min(axis=1, keepdims=True)) / 1000.0).astype(np.float32)
        proba /= proba.sum(axis=1, keepdims=True)
        remaining = rng.exponential(mean_s) - (time.perf_counter() - start)
        if remaining > 0:
            time.sleep(remaining)
        return [label, proba]

    return compute


GENERATE_INPUTS = [Tensor(name="text_input", dtype=np.bytes_, shape=(1,)),
                   Tensor(name="max_tokens", dtype=np.int32, shape=(1,), optional=True)]
GENERATE_OUTPUTS = [Tensor(name="text_output", dtype=np.bytes_, shape=(1,)),
                    Tensor(name="num_output_tokens", dtype=np.int32, shape=(1,))]
EOS = 0


def generative_model(model_dir: Path):
    """A decoupled generator for tailrace's tiny_lm / synthetic_lm: each request's prompt (words; a word outside the
    vocabulary by a stable hash, as the embedded server does) prefilled in one decoder step, then one response per
    generated token (`text_output`, `num_output_tokens` = 1) until max_tokens (default 16). tiny_lm runs its ONNX
    decoder step; synthetic_lm sleeps its step times. End of sequence is never generated (ignore_eos)."""
    import zlib

    config_text = (model_dir / "config.pbtxt").read_text()
    words = json.loads((model_dir / "1" / "vocab.json").read_text())
    ids = {w: i for i, w in enumerate(words)}
    span = len(words) - 1
    if _pbtxt_parameter(config_text, "decoder", "onnx") == "onnx":
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(model_dir / "1" / "decoder.onnx"), options,
                                       providers=["CPUExecutionProvider"])
        hidden = int(_pbtxt_parameter(config_text, "hidden", "128"))

        def step(tokens: np.ndarray, state: np.ndarray):
            next_token, new_state = session.run(None, {"tokens": tokens[None, :], "mask": np.ones((1, len(tokens)),
                                                       np.float32), "state": state[None, :]})
            return int(next_token[0]), new_state[0]
    else:
        step_s = float(_pbtxt_parameter(config_text, "step_ms", "8")) / 1000.0
        per_token_s = float(_pbtxt_parameter(config_text, "prefill_ms_per_token", "0")) / 1000.0
        hidden = 1

        def step(tokens: np.ndarray, state: np.ndarray):
            time.sleep(step_s + per_token_s * (len(tokens) - 1))
            return 1 + (int(tokens[-1]) * 7 + int(state[0])) % span, state + len(tokens)

    def encode(text: str) -> np.ndarray:
        return np.asarray([ids.get(w) or 1 + zlib.crc32(w.encode()) % span for w in text.split()] or [1], np.int64)

    def infer(requests):
        runs = []
        for request in requests:
            text = request["text_input"].reshape(-1)[0]
            text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
            max_tokens = int(request["max_tokens"].reshape(-1)[0]) if "max_tokens" in request else 16
            runs.append({"tokens": encode(text), "state": np.zeros(hidden, np.float32), "left": max(1, max_tokens)})
        while any(r["left"] for r in runs):
            responses = []
            for r in runs:
                if not r["left"]:
                    responses.append({"text_output": np.array([b""], dtype=np.bytes_),
                                      "num_output_tokens": np.array([0], dtype=np.int32)})
                    continue
                token, r["state"] = step(r["tokens"], r["state"])
                token = token if token != EOS else 1 + int(np.abs(r["state"]).argmax()) % span
                r["tokens"], r["left"] = np.asarray([token], np.int64), r["left"] - 1
                responses.append({"text_output": np.array([(" " + words[token]).encode()], dtype=np.bytes_),
                                  "num_output_tokens": np.array([1], dtype=np.int32)})
            yield responses

    return infer


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
    found = {d.name: d for d in sorted(root.iterdir()) if d.is_dir() and
             ((d / "config.pbtxt").exists() or (d / "1" / "model.onnx").exists())}
    missing = [m for m in only if m not in found]
    if missing:
        raise SystemExit(f"--model: not in {root}: {', '.join(missing)} (has {', '.join(found)})")
    return {m: found[m] for m in (only or found)}


def model_config(args: argparse.Namespace, is_batched: bool = True) -> ModelConfig:
    if not is_batched:
        return ModelConfig(batching=False)
    batcher = None if args.no_dynamic_batching else DynamicBatcher(max_queue_delay_microseconds=args.queue_delay_us)
    return ModelConfig(batching=True, max_batch_size=args.max_batch, batcher=batcher)


def _tensors(specs, is_batched: bool) -> list[Tensor]:
    """PyTriton tensors: with batching the batch dimension is left out, and a per-row scalar is shape (1,)."""
    out = []
    for name, dtype, shape in specs:
        dims = shape[1:] if is_batched else shape
        out.append(Tensor(name=name, dtype=dtype, shape=dims or (1,)))
    return out


DIGITS_INPUTS = [("input", np.float32, (-1, 64))]
DIGITS_OUTPUTS = [("label", np.int64, (-1,)), ("probabilities", np.float32, (-1, 10))]


def bind_models(triton: Triton, models: dict[str, Path], args: argparse.Namespace, trace_log: TraceLog) -> None:
    for name, model_dir in models.items():
        onnx_path = model_dir / "1" / "model.onnx"
        if (model_dir / "1" / "vocab.json").exists():  # a generative model: decoupled, one response per token
            triton.bind(model_name=name, infer_func=[generative_model(model_dir) for _ in range(args.instances)],
                        inputs=GENERATE_INPUTS, outputs=GENERATE_OUTPUTS,
                        config=ModelConfig(batching=False, decoupled=True), strict=True)
            LOG.info("bound %s (decoupled, %d instance(s)): text_input → text_output per token", name, args.instances)
            continue
        if onnx_path.exists():
            parts = [onnx_model(onnx_path, args.threads) for _ in range(args.instances)]
            _, inputs, outputs, is_batched = parts[0]
        elif (model_dir / "1" / "centroids.npy").exists():  # one slot: M/M/1 by construction
            parts = [(synthetic_compute(model_dir), DIGITS_INPUTS, DIGITS_OUTPUTS, True)]
            inputs, outputs, is_batched = DIGITS_INPUTS, DIGITS_OUTPUTS, True
        else:
            LOG.warning("skipping %s: neither 1/model.onnx nor a synthetic model", name)
            continue
        wrap = batched if is_batched else unbatched
        in_names, out_names = [n for n, _, _ in inputs], [n for n, _, _ in outputs]
        functions = [wrap(compute, in_names, out_names, trace_log) for compute, *_ in parts]
        triton.bind(model_name=name, infer_func=functions, inputs=_tensors(inputs, is_batched),
                    outputs=_tensors(outputs, is_batched), config=model_config(args, is_batched), strict=True)
        LOG.info("bound %s (%d instance(s), %s): inputs %s, outputs %s", name, len(functions),
                 f"max_batch {args.max_batch}" if is_batched else "no batching", inputs, outputs)


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
        threading.Thread(target=_exit_after, args=(TEARDOWN_S, trace_log), name="teardown-bound", daemon=True).start()
    trace_log.close()
    return 0


def _exit_after(seconds: float, trace_log: TraceLog) -> None:
    """Exit the program if PyTriton's teardown (or the interpreter's, joining its threads) still runs `seconds` on."""
    time.sleep(seconds)
    LOG.error("PyTriton's teardown still running %.0f s after the stop: exiting without it", seconds)
    trace_log.close()
    logging.shutdown()
    os._exit(4)


if __name__ == "__main__":
    sys.exit(main())
