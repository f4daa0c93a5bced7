"""The servers `tailrace run` starts itself: the embedded endpoint (one process, or one per model) and a local
Triton (PyTriton). Each start is timed for cold-start reporting: process spawn → ready → first successful
inference of each model (a real sample from the held-out set).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import httpx
import numpy as np

from tailrace.contract.internal_processes import AnswerModel, EmbeddedServerLaunch, ServerOptions
from tailrace.contract.plan import endpoint_kind
from tailrace.contract.profile import EMBEDDED, TRITON, Profile
from tailrace.contract.tensors import NUMPY_DTYPES, to_raw
from tailrace.harness.client.tls import default_verify_context
from tailrace.harness.services.processes import ManagedProcess, free_port, start_embedded_endpoint, stop_each
from tailrace.harness.services.triton_server import TritonOptions, TritonServer, start_triton


@dataclass
class ServerInstance:
    """One started server process and how to reach it."""

    kind: str  # "embedded" | "triton"
    models: tuple[str, ...]
    http_url: str
    grpc_url: str
    metrics_url: str
    process: ManagedProcess
    triton: TritonServer | None = None
    cold_start: dict = field(default_factory=dict)

    def serves(self, model: str) -> bool:
        return model in self.models


@dataclass
class Servers:
    """Every server of a run (or of a capacity search, which reuses them across trials)."""

    instances: list[ServerInstance] = field(default_factory=list)

    def serving(self, kind: str, model: str) -> ServerInstance | None:
        """The started server of `kind` ("embedded" | "triton") that serves `model`."""
        return next((s for s in self.instances if s.kind == kind and s.serves(model)), None)

    def resolve(self, profile: Profile) -> Profile:
        """The profile with url 'embedded' / 'triton' replaced by the started server's address, and that
        server's statistics and metrics URLs; a monitor's url 'embedded' by the embedded server's metrics URL."""
        endpoints = []
        for ep in profile.endpoints:
            server = self.serving(endpoint_kind(ep), ep.model)
            if server is not None:
                url = server.grpc_url if ep.api.grpc else server.http_url
                ep = ep.model_copy(update={"url": url, "stats_url": server.http_url,
                                           "metrics_url": server.metrics_url})
            endpoints.append(ep)
        monitors = [m.model_copy(update={"url": self._started_metrics(profile, m.url, m.endpoints)})
                    if m.url in (EMBEDDED, TRITON) and self._started_metrics(profile, m.url, m.endpoints) else m
                    for m in profile.monitors]  # a monitor of a started server: its /metrics
        return profile.model_copy(update={"endpoints": endpoints, "monitors": monitors})

    def _started_metrics(self, profile: Profile, kind: str, watched: list[str]) -> str | None:
        """The /metrics of the started server (`kind`: embedded, triton) a monitor watches: the one serving its first
        endpoint's model (one process per model: a monitor per variant), else the first of that kind."""
        models = [e.model for e in profile.endpoints if e.name in watched[:1] and isinstance(e.model, str)]
        server = self.serving(kind, models[0]) if models else None
        server = server or next((s for s in self.instances if s.kind == kind and s.metrics_url), None)
        return server.metrics_url if server is not None else None

    def stop(self) -> None:
        stop_each(server.triton.stop if server.triton is not None else partial(server.process.stop, timeout=10)
                  for server in reversed(self.instances))


def zero_request(metadata: dict) -> tuple[bytes, dict[str, str]]:
    """An infer body of zeros (empty strings for BYTES) for every input of a model's metadata, each dynamic
    dimension 1, in the binary tensor extension both ways (Triton takes and gives FP16 / BF16 only so): a
    request any model takes, whatever its inputs. Returns (body, headers)."""
    inputs, blobs = [], []
    for t in metadata.get("inputs") or []:
        shape = [1 if d < 0 else d for d in t["shape"]]
        if t["datatype"] == "BYTES":
            zeros = np.full(math.prod(shape), b"", dtype=object)
        else:
            zeros = np.zeros(math.prod(shape), dtype=NUMPY_DTYPES[t["datatype"]])
        raw = to_raw(zeros, t["datatype"])
        inputs.append({"name": t["name"], "datatype": t["datatype"], "shape": shape,
                       "parameters": {"binary_data_size": len(raw)}})
        blobs.append(raw)
    header = json.dumps({"inputs": inputs, "parameters": {"binary_data_output": True}}).encode()
    return header + b"".join(blobs), {"Inference-Header-Content-Length": str(len(header)),
                                      "Content-Type": "application/octet-stream"}


def _first_success(model: str, send, timeout_s: float) -> dict:
    """Call `send(client)` (an httpx.Response: one real request) until it answers 200; when it did and how long
    that request took, or why none did."""
    deadline = time.monotonic() + timeout_s
    attempts, last = 0, ""
    with httpx.Client(timeout=10.0, verify=default_verify_context()) as client:
        while time.monotonic() < deadline:
            attempts += 1
            try:
                sent = time.time_ns()
                r = send(client)
                if r.status_code == 200:
                    done = time.time_ns()
                    return {"model": model, "first_ok_ns": done, "first_request_ms": (done - sent) / 1e6,
                            "attempts": attempts}
                last = f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                last = str(exc)
            time.sleep(0.05)
    return {"model": model, "first_ok_ns": None, "attempts": attempts, "error": last[:200]}


def _probe_first_inference(base: str, model: str, timeout_s: float = 60.0) -> dict:
    """One real inference (zeros, from the model's metadata) until it succeeds."""
    encoded: list = []

    def send(client: httpx.Client) -> httpx.Response:
        if not encoded:
            meta = client.get(f"{base}/v2/models/{model}")
            if meta.status_code != 200:
                raise httpx.HTTPError(f"metadata: HTTP {meta.status_code}")
            encoded.append(zero_request(meta.json()))
        body, headers = encoded[0]
        return client.post(f"{base}/v2/models/{model}/infer", content=body, headers=headers)

    return _first_success(model, send, timeout_s)


def _probe_first_generation(base: str, model: str, timeout_s: float = 60.0) -> dict:
    """One real generation (one token) through the generate extension (the embedded server and a real Triton both
    answer it) until it succeeds."""
    return _first_success(model, lambda client: client.post(f"{base}/v2/models/{model}/generate_stream",
                                                            json={"text_input": "warm up", "max_tokens": 1}),
                          timeout_s)


def _timed(kind: str, models: tuple[str, ...], spawn_ns: int, http_url: str, generative: frozenset[str] = frozenset()
           ) -> dict:
    ready_ns = time.time_ns()
    probes = [(_probe_first_generation if m in generative else _probe_first_inference)(http_url, m) for m in models]
    firsts = [p["first_ok_ns"] for p in probes if p["first_ok_ns"]]
    return {"kind": kind, "models": list(models), "spawn_ns": spawn_ns, "ready_ns": ready_ns,
            "ready_s": (ready_ns - spawn_ns) / 1e9,
            "first_success_s": (min(firsts) - spawn_ns) / 1e9 if firsts else None,
            "per_model": [p | {"first_success_s": (p["first_ok_ns"] - spawn_ns) / 1e9 if p["first_ok_ns"] else None}
                          for p in probes]}


# the generative engine's settings of [embedded], by BatchingLimits' names
BATCHING_FIELDS = ("max_num_seqs", "max_num_batched_tokens", "max_waiting", "max_model_len", "kv_cache_tokens")


def embedded_server_options(profile: Profile, models: tuple[str, ...] = (),
                            answers: dict[str, AnswerModel] | None = None) -> ServerOptions:
    """The profile's [embedded] table as the server's own options (`models`: only these; `answers`: the scripted
    models' answer keys, harness/orchestration/answer_keys.py)."""
    e = profile.embedded
    batching: dict[str, dict[str, int]] = {}
    for name in BATCHING_FIELDS:
        for model, n in getattr(e, name).items():
            batching.setdefault(model, {})[name] = n
    for model, on in e.prefix_caching.items():
        batching.setdefault(model, {})["enable_prefix_caching"] = int(on)
    return ServerOptions(repository=Path(e.models_dir), slots=dict(e.slots), queue_depth=dict(e.queue_depth),
                         max_batch=dict(e.max_batch), batching=batching, service_time_mean_ms=e.mm1_mean_ms or None,
                         fault_injection=e.fault_injection, models=models,
                         answers={m: a for m, a in (answers or {}).items() if not models or m in models})


BIND_ATTEMPTS = 3


def _start_embedded(options: ServerOptions, models: tuple[str, ...], logs: Path, cpus: list[int] | None,
                    log) -> tuple[ManagedProcess, int, int]:
    """An embedded server on free ports: (its process, HTTP port, gRPC port). A port found free can be taken by
    another process before the server binds it; that start is tried again on other ports (BIND_ATTEMPTS in all)."""
    attempt = 1
    while True:
        http_port, grpc_port = free_port(), free_port()
        log(f"starting embedded endpoint for {', '.join(models)} on 127.0.0.1:{http_port} (HTTP) / "
            f":{grpc_port} (gRPC)")
        try:
            launch = EmbeddedServerLaunch(options=options, http_port=http_port, grpc_port=grpc_port)
            return start_embedded_endpoint(launch, logs / f"endpoint-{http_port}.log", cpus=cpus), http_port, grpc_port
        except RuntimeError as exc:
            taken = any(m in str(exc).lower() for m in ("address already in use", "failed to bind"))
            if not taken or attempt == BIND_ATTEMPTS:
                raise
            log(f"port {http_port} or {grpc_port} was taken before the endpoint bound it: trying others")
            attempt += 1


def start_servers(profile: Profile, logs: Path, log=print, answers: dict[str, AnswerModel] | None = None) -> Servers:
    """Start what the profile's 'embedded' / 'triton' endpoints need; on failure, stop what started. `answers`: the
    scripted models' answer keys ([embedded.accuracy])."""
    servers = Servers()
    try:
        embedded_models = tuple(sorted({e.model for e in profile.endpoints if e.url == EMBEDDED}))
        groups = [(m,) for m in embedded_models] if profile.embedded.process_per_model else \
            ([embedded_models] if embedded_models else [])
        for models in groups:
            options = embedded_server_options(profile, models if profile.embedded.process_per_model else (), answers)
            spawn = time.time_ns()
            proc, http_port, grpc_port = _start_embedded(options, models, logs, profile.embedded.cpus, log)
            base = f"http://127.0.0.1:{http_port}"
            servers.instances.append(ServerInstance("embedded", models, base, f"grpc://127.0.0.1:{grpc_port}",
                                                    f"{base}/metrics", proc))
            generative = frozenset(e.model for e in profile.endpoints if e.url == EMBEDDED and (e.generative or e.pooling))
            servers.instances[-1].cold_start = _timed("embedded", models, spawn, base, generative)
        triton_models = tuple(sorted({e.model for e in profile.endpoints if e.url == TRITON}))
        if triton_models:
            t = profile.triton
            log(f"starting Triton (PyTriton) for {', '.join(triton_models)}")
            spawn = time.time_ns()
            triton = start_triton(Path(t.models_dir), logs, options=TritonOptions(
                max_batch=t.max_batch, queue_delay_us=t.queue_delay_us, dynamic_batching=t.dynamic_batching,
                instances=t.instances, models=triton_models), python=t.python, log=log)
            servers.instances.append(ServerInstance("triton", triton_models, triton.http_url, triton.grpc_url,
                                                    triton.metrics_url, triton.process, triton))
            generative = frozenset(e.model for e in profile.endpoints if e.url == TRITON and e.generative)
            servers.instances[-1].cold_start = _timed("triton", triton_models, spawn, triton.http_url, generative)
            log(f"Triton ready on {triton.http_url} (HTTP) / {triton.grpc_url} (gRPC) / {triton.metrics_url}")
    except BaseException:
        servers.stop()
        raise
    return servers
