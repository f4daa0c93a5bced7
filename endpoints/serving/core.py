"""Protocol-independent core of the embedded server: the model repository, schedulers and timings."""
from __future__ import annotations

import time
from pathlib import Path

from tailrace.contract.internal_processes import ServerOptions
from tailrace.endpoints.models.decoders import SyntheticDecoder, load_decoder
from tailrace.endpoints.models.generative_build import GENERATIVE_BACKEND
from tailrace.endpoints.models.model_config import ModelSpec, model_spec
from tailrace.endpoints.models.runners import load_runner
from tailrace.endpoints.serving.answers import ScriptedAnswers
from tailrace.endpoints.serving.continuous import BatchingLimits, ContinuousBatcher
from tailrace.endpoints.serving.errors import InferenceError, not_found
from tailrace.endpoints.serving.generation_metrics import GenerationMetrics
from tailrace.endpoints.serving.metrics import ServerMetrics
from tailrace.endpoints.serving.scheduler import ModelScheduler, Timings

SERVER_NAME = "tailrace"
SERVER_VERSION = "0.1.0"
EXTENSIONS = ["binary_tensor_data", "statistics", "model_configuration", "server_timing", "trace_context"]


def load_specs(repository: Path, only: tuple[str, ...] = ()) -> dict[str, ModelSpec]:
    """Every model directory (one holding config.pbtxt) of a Triton-layout repository."""
    if not repository.is_dir():
        raise ValueError(f"model repository {repository} does not exist (build it: tailrace models build --out DIR)")
    specs = {}
    dirs = sorted({c.parent for c in repository.glob("*/config.pbtxt")} | {m.parent.parent for m in
                                                                            repository.glob("*/1/model.onnx")})
    for model_dir in dirs:
        if only and model_dir.name not in only:
            continue
        spec = model_spec(model_dir)
        specs[spec.name] = spec
    missing = set(only) - set(specs)
    if missing:
        raise ValueError(f"model repository {repository} has no model(s) {', '.join(sorted(missing))}")
    if not specs:
        raise ValueError(f"model repository {repository} holds no model (no */config.pbtxt or */1/model.onnx)")
    return specs


class RequestClock:
    """The server's receive instant of one request; send time derives from the same monotonic clock."""

    __slots__ = ("receive_wall_ns", "receive_mono_ns")

    def __init__(self, receive_wall_ns: int | None = None, receive_mono_ns: int | None = None) -> None:
        self.receive_wall_ns = time.time_ns() if receive_wall_ns is None else receive_wall_ns
        self.receive_mono_ns = time.perf_counter_ns() if receive_mono_ns is None else receive_mono_ns

    @classmethod
    def start(cls) -> "RequestClock":
        """The clock of a request received now."""
        return cls()

    def elapsed_ns(self) -> int:
        return time.perf_counter_ns() - self.receive_mono_ns


def timing_parameters(clock: RequestClock, timings: Timings, trace_id: str | None) -> dict:
    """Server-side timing for the response: queue, compute, receive and send epoch ns, trace ID."""
    send_wall_ns = clock.receive_wall_ns + time.perf_counter_ns() - clock.receive_mono_ns
    params = {
        "queue_ns": timings.queue_ns,
        "compute_ns": timings.compute_ns,
        "compute_input_ns": timings.compute_input_ns,
        "compute_infer_ns": timings.compute_infer_ns,
        "compute_output_ns": timings.compute_output_ns,
        "server_receive_ns": clock.receive_wall_ns,
        "server_send_ns": send_wall_ns,
    }
    if trace_id:
        params["trace_id"] = trace_id
    return params


def server_timing_value(params: dict) -> bytes:
    """A `Server-Timing` header value (durations in ms; epoch stamps as descriptions), as bytes."""
    receive, send = params["server_receive_ns"], params["server_send_ns"]
    return b'queue;dur=%.3f, compute;dur=%.3f, total;dur=%.3f, recv;desc="%d", send;desc="%d"' % (
        params["queue_ns"] / 1e6, params["compute_ns"] / 1e6, (send - receive) / 1e6, receive, send)


def server_timing_header(params: dict) -> str:
    """server_timing_value as text (gRPC trailing metadata)."""
    return server_timing_value(params).decode()


class InferenceServer:
    """Models, their schedulers and the server's metrics."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.metrics = ServerMetrics(lambda: (s.statistics for s in self.schedulers.values()), lambda: [
            *((n, s.statistics.cpu_ns) for n, s in self.schedulers.items()),
            *((n, g.cpu_ns) for n, g in self.generators.items())])
        every = load_specs(options.repository, options.models)
        self.specs = {n: s for n, s in every.items() if s.backend != GENERATIVE_BACKEND}  # KServe v2 models
        unknown = (set(options.slots) | set(options.queue_depth) | set(options.max_batch)) - set(self.specs)
        if unknown:
            raise ValueError(f"--slots/--queue-depth/--max-batch name unknown model(s): {', '.join(sorted(unknown))}")
        generative = self.generative_specs = {n: s for n, s in every.items() if s.backend == GENERATIVE_BACKEND}
        unknown = set(options.batching) - set(generative)
        if unknown:
            raise ValueError(f"--max-num-seqs/--max-num-batched-tokens/--max-waiting/--max-model-len/--kv-cache-tokens/"
                             f"--prefix-caching name unknown generative "
                             f"model(s): {', '.join(sorted(unknown))}")
        generation_metrics = GenerationMetrics(self.metrics.registry) if generative else None
        self.generators: dict[str, ContinuousBatcher] = {}
        for name, spec in generative.items():
            try:
                limits = BatchingLimits.of(spec.parameters, options.batching.get(name))
            except ValueError as exc:
                raise ValueError(f"{spec.directory}: {exc}") from None
            self.generators[name] = ContinuousBatcher(name, load_decoder(spec), limits, generation_metrics)
        unknown = set(options.answers) - set(generative)
        if unknown:
            raise ValueError(f"scripted answers name unknown generative model(s): {', '.join(sorted(unknown))}")
        not_synthetic = [m for m in options.answers if not isinstance(self.generators[m].decoder, SyntheticDecoder)]
        if not_synthetic:
            raise ValueError(f"scripted answers need a synthetic decoder; {', '.join(not_synthetic)} has its own")
        self.answers = {m: ScriptedAnswers(a) for m, a in options.answers.items()}
        self.schedulers: dict[str, ModelScheduler] = {}
        for name, spec in self.specs.items():
            runner = load_runner(spec, options.service_time_mean_ms)
            self.schedulers[name] = ModelScheduler(
                name, runner, options.slots.get(name, spec.instance_count),
                options.queue_depth.get(name, spec.max_queue_size), options.max_batch.get(name, 1))
        self.ready = True

    def spec(self, name: str) -> ModelSpec:
        """The model's spec (a generative model's too: its metadata, readiness and config), or a NOT_FOUND error
        naming it."""
        spec = self.specs.get(name) or self.generative_specs.get(name)
        if spec is None:
            raise not_found(f"unknown model '{name}' (models: {', '.join(sorted(self.specs))})")
        return spec

    def scheduler(self, name: str) -> ModelScheduler:
        """A one-shot model's scheduler; a generative model's inference goes through its generate routes."""
        scheduler = self.schedulers.get(name)
        if scheduler is None:
            self.spec(name)  # NOT_FOUND for an unknown model
            raise InferenceError(f"model '{name}' generates (decoupled): use /v2/models/{name}/generate_stream, "
                                 f"/v2/models/{name}/generate or the OpenAI-compatible /v1 routes")
        return scheduler

    def check_version(self, name: str, version: str | None) -> None:
        """Only version 1 exists (the repository layout's `1/`)."""
        if version not in (None, "", "1"):
            raise not_found(f"model '{name}' has no version '{version}' (versions: 1)")

    def record_failure(self, name: str, clock: RequestClock, error: InferenceError) -> None:
        """Count a failed request of a known model in its statistics and metrics."""
        scheduler = self.schedulers.get(name)
        if scheduler is not None:
            reason = {400: "invalid_argument", 503: "unavailable"}.get(error.http_status, "other")
            scheduler.statistics.record_failure(clock.elapsed_ns(), reason)

    def model_metadata(self, name: str) -> dict:
        """KServe v2 model metadata."""
        spec = self.spec(name)
        tensors = lambda ts: [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in ts]  # noqa
        return {"name": spec.name, "versions": ["1"], "platform": _platform(spec),
                "inputs": tensors(spec.inputs), "outputs": tensors(spec.outputs)}

    def statistics(self, name: str | None) -> dict:
        """Triton statistics extension body for one model or all."""
        if name in self.generators:
            raise not_found(f"model '{name}' generates: its statistics are the server's Prometheus metrics "
                            "(/metrics, tailrace:*)")
        names = [self.spec(name).name] if name else sorted(self.specs)
        return {"model_stats": [self.schedulers[n].statistics.as_dict() for n in names]}

    def stop(self) -> None:
        """Refuse queued work and end the slots."""
        self.ready = False
        for scheduler in self.schedulers.values():
            scheduler.stop()
        for engine in self.generators.values():
            engine.stop()
        for answers in self.answers.values():
            answers.close()


def _platform(spec: ModelSpec) -> str:
    return "onnxruntime_onnx" if spec.backend.startswith("onnxruntime") else spec.backend
