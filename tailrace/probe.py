"""`tailrace probe URL --model M`: the first command to run against a staging endpoint. It prints the server's
and the model's metadata, the request tailrace would send, whether the model takes it, then sends a few
requests and prints their latency, the server's timing and the answers. Exit 0 when every step worked, 1 on a
mismatch or a failed request, 2 when the endpoint or the model cannot be reached."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from harness.orchestration.endpoint_check import EndpointCheckError, Tensor, mismatches, model_info
from harness.worker.senders import GrpcSender, HttpSender, request_signature


def protocol_of(url: str, protocol: str | None) -> str:
    """The protocol given, or the URL scheme's (grpc:// → kserve-grpc, else kserve-http)."""
    return protocol or ("kserve-grpc" if url.startswith("grpc://") else "kserve-http")


def probe_data(models: Path, dataset: str, n_features: int) -> tuple[np.ndarray, str]:
    """Rows to send: the held-out set when it is there, else zero rows as wide as the model's input."""
    path = models / dataset
    if path.is_file():
        with np.load(path) as data:
            return data["X"].astype(np.float32), str(path)
    return np.zeros((8, max(1, n_features)), dtype=np.float32), "zeros (no held-out set at " + str(path) + ")"


def run_probe(url: str, model: str, protocol: str | None, requests: int, batch_size: int, timeout_ms: float,
              models: Path, dataset: str) -> int:
    protocol = protocol_of(url, protocol)
    try:
        info = model_info(url, protocol, model, timeout_s=timeout_ms / 1000)
    except EndpointCheckError as exc:
        print(f"tailrace probe: {exc}", file=sys.stderr)
        return 2
    server = info.server
    print(f"server {server.get('name', '?')} {server.get('version', '')} ({protocol} {url}); extensions: "
          f"{', '.join(server.get('extensions') or []) or 'none'}")
    print(f"model {info.name} versions {info.versions} platform {info.platform or '?'}: "
          f"{'ready' if info.ready else 'NOT READY'}")
    for kind, tensors in (("input", info.inputs), ("output", info.outputs)):
        for t in tensors:
            print(f"  {kind:6} {t}")
    width = info.inputs[0].shape[-1] if info.inputs and info.inputs[0].shape else -1
    X, source = probe_data(models, dataset, width)
    sends, reads = request_signature(X.shape[1], batch_size)
    for name, datatype, shape in sends:
        print(f"tailrace sends {name} {datatype} {list(shape)} ({int(np.prod(shape)) * 4:,} bytes of tensor data, "
              f"rows from {source}); asks for {', '.join(reads)}")
    problems = mismatches(info, [Tensor(*s) for s in sends], reads)
    for p in problems:
        print(f"MISMATCH: {p}")
    if problems:
        return 1
    return _send_some(url, protocol, model, X, requests, batch_size, timeout_ms)


def _send_some(url: str, protocol: str, model: str, X: np.ndarray, requests: int, batch_size: int,
               timeout_ms: float) -> int:
    """Send `requests` requests one after another and print each outcome; 1 if any failed."""
    if protocol == "kserve-grpc":
        sender = GrpcSender(url, model, X, batch_size, timeout_ms / 1000, None)
    else:
        sender = HttpSender(url, model, X, batch_size, timeout_ms / 1000, 4, None)
    failed = 0
    try:
        for k in range(requests):
            start = time.perf_counter_ns()
            out = sender.send(k % len(X), {}, lambda: None)
            ms = (time.perf_counter_ns() - start) / 1e6
            timing = (f"server queue {out.server_queue_ns / 1e6:.2f} ms, compute {out.server_compute_ns / 1e6:.2f} ms"
                      if out.server_compute_ns >= 0 else "no server timing")
            answer = f"prediction {out.prediction}" if out.status == "ok" else f"{out.code} {out.error}"
            print(f"request {k + 1}: {out.status} in {ms:.2f} ms ({timing}); {answer}")
            failed += out.status != "ok"
    finally:
        sender.close()
    return 1 if failed else 0
