"""Scenario profiles (TOML): schema, validation with errors that name the file and the field path."""
from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path

from pydantic import Field, ValidationError, model_validator

from tailrace.contract.profile.base import (
    CHAT_APIS,
    DATATYPES,
    EMBEDDED,
    GENERATIVE,
    INPROCESS,
    MASTER_CLOCK,
    NAME,
    POOLING,
    STARTED_BY_RUN,
    TLS_SCHEMES,
    TRITON,
    TokenCount,
    _fixed,
    _Strict,
    check_url,
)
from tailrace.contract.profile.endpoints import (
    MIXABLE,
    STRUCTURED,
    Audio,
    Cancel,
    Check,
    DeclaredTensor,
    Embeddings,
    Endpoint,
    Images,
    ModelShare,
    Prompts,
    Rerank,
    Sessions,
    Structured,
    ThinkTime,
    Tls,
)
from tailrace.contract.profile.goals import (
    PIPELINE_KINDS,
    PIPELINE_METRICS,
    RAG_PROMPT,
    TOKEN_METRICS,
    Pipeline,
    PipelineStage,
    Slo,
)
from tailrace.contract.profile.load import Arrivals, Clock, Inputs, Load, Phase, Region, Trace
from tailrace.contract.profile.settings import (
    DECISION_METRICS,
    Capacity,
    ColdStart,
    Decision,
    DecisionConstraints,
    Embedded,
    Generator,
    Monitor,
    Otel,
    OtelExport,
    OtelReceive,
    ServerStats,
    TritonLocal,
)
from tailrace.contract.profile.sweep import Axis, AxisRange, Serve, Sweep


class Profile(_Strict):
    """A scenario profile."""

    name: str = Field(pattern=NAME)
    description: str = ""
    output_dir: str = "runs"
    endpoints: list[Endpoint] = Field(min_length=1)
    regions: list[Region] = Field(min_length=1)
    load: Load
    clock: Clock = Field(default_factory=Clock)
    inputs: Inputs = Field(default_factory=Inputs)
    slos: list[Slo] = Field(default_factory=list)
    embedded: Embedded = Field(default_factory=Embedded)
    triton: TritonLocal = Field(default_factory=TritonLocal)
    server_stats: ServerStats = Field(default_factory=ServerStats)
    otel: Otel = Field(default_factory=Otel, description="OpenTelemetry: the servers' spans received, the requests "
                                                        "exported as spans")
    monitors: list[Monitor] = Field(default_factory=list, description="what the hardware did: exporters scraped "
                                    "through the run (utilization, memory, power, energy)")
    cold_start: ColdStart = Field(default_factory=ColdStart)
    capacity: Capacity = Field(default_factory=Capacity)
    decision: Decision | None = None
    pipelines: list[Pipeline] = Field(default_factory=list, description="chains of stages over the endpoints "
                                      "(RAG: embed → rerank → generate), started by the arrival process")
    generator: Generator = Field(default_factory=Generator)
    sweep: Sweep | None = Field(None, description="tailrace sweep's axes, points, servers and SLO tiers (tailrace "
                                                  "run ignores it)")
    overrides: list[str] = Field(default_factory=list, description="set by tailrace from --set / --rate / --duration "
                                                                   "and TAILRACE_SET_* (contract/overrides.py), never "
                                                                   "in a profile file: the manifest records them")

    @model_validator(mode="after")
    def _consistent(self) -> "Profile":
        total = sum(r.share for r in self.regions)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"regions: shares must add up to 1, they add up to {total:g}")
        for field_name, items in (("endpoints", self.endpoints), ("regions", self.regions),
                                  ("monitors", self.monitors)):
            names = [i.name for i in items]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{field_name}: duplicate name(s) {', '.join(dupes)}")
        if self.load.scenario == "single-stream":
            crowded = [r.name for r in self.regions if r.workers != 1]
            if crowded:
                raise ValueError(f"regions: single-stream runs one stream per region; set workers = 1 for "
                                 f"{', '.join(crowded)}")
        endpoint_names = {e.name for e in self.endpoints}
        if self.decision is not None:
            for i, v in enumerate(self.decision.variants):
                if v not in endpoint_names:
                    raise ValueError(f"decision.variants[{i}]: no endpoint named {v!r}")
            for v in self.decision.capacity_rps:
                if v not in endpoint_names:
                    raise ValueError(f"decision.capacity_rps: no endpoint named {v!r}")
            b = self.decision.baseline
            if b is not None and next((e.protocol for e in self.endpoints if e.name == b), None) != "inprocess":
                raise ValueError(f"decision.baseline: {b!r} must name an endpoint with protocol 'inprocess'")
        self._check_pipelines()
        if any(m.url == EMBEDDED for m in self.monitors) and not any(e.url == EMBEDDED for e in self.endpoints):
            raise ValueError("monitors: url 'embedded' is the embedded server's, and no endpoint has url 'embedded'")
        if any(m.url == TRITON for m in self.monitors) and not any(e.url == TRITON for e in self.endpoints):
            raise ValueError("monitors: url 'triton' is the started Triton's, and no endpoint has url 'triton'")
        for i, m in enumerate(self.monitors):
            unknown = [e for e in m.endpoints if e not in endpoint_names]
            if unknown:
                raise ValueError(f"monitors[{i}].endpoints: no endpoint named {unknown[0]!r}")
        slo_endpoints = endpoint_names | {"*"}
        regions = {r.name for r in self.regions} | {"*"}
        for i, slo in enumerate(self.slos):
            if slo.endpoint not in slo_endpoints:
                raise ValueError(f"slos[{i}].endpoint: no endpoint named {slo.endpoint!r}")
            if slo.region not in regions:
                raise ValueError(f"slos[{i}].region: no region named {slo.region!r}")
            if slo.pipeline not in {p.name for p in self.pipelines} | {"*"}:
                raise ValueError(f"slos[{i}].pipeline: no pipeline named {slo.pipeline!r}")
            if slo.metric in PIPELINE_METRICS and not self.pipelines:
                raise ValueError(f"slos[{i}].metric: {slo.metric} needs a [[pipelines]] section")
            if slo.metric == "pipeline_ttft" and not all(
                    self._streams_answer(p) for p in self.pipelines if slo.pipeline in ("*", p.name)):
                raise ValueError(f"slos[{i}].metric: pipeline_ttft needs a pipeline whose last stage streams its "
                                 "answer (a generative endpoint, prompts.stream true)")
            if slo.model != "*":
                mix = next((e.models for e in self.endpoints if e.name == slo.endpoint), ())
                if slo.metric not in (*TOKEN_METRICS, "latency") or not any(m.name == slo.model for m in mix):
                    raise ValueError(f"slos[{i}].model: names a model of the named endpoint's model list, for a "
                                     f"ttft, tpot, itl, e2e or latency SLO ({slo.model!r} is not one of "
                                     f"{slo.endpoint!r}'s: {', '.join(m.name for m in mix) or 'it has no list'})")
            if slo.metric in TOKEN_METRICS:
                generative = {e.name for e in self.endpoints if e.generative}
                if not generative or (slo.endpoint != "*" and slo.endpoint not in generative):
                    raise ValueError(f"slos[{i}].metric: {slo.metric} is a streamed request's: it needs "
                                     f"{'the endpoint ' + repr(slo.endpoint) if slo.endpoint != '*' else 'an endpoint'}"
                                     " of a generative protocol (openai-chat, openai-completions, triton-generate, "
                                     "kserve-grpc-stream)")
                whole = {e.name for e in self.endpoints if e.generative and e.prompts and not e.prompts.stream}
                if slo.metric != "e2e" and (slo.endpoint in whole or (slo.endpoint == "*" and generative <= whole)):
                    raise ValueError(f"slos[{i}].metric: {slo.metric} needs streamed responses, and "
                                     f"{', '.join(sorted(whole))} asks for whole ones (prompts.stream = false)")
        return self

    def _check_pipelines(self) -> None:
        """Each pipeline's stages name endpoints of a kind a stage can be, in an order that makes a chain; an
        endpoint of weight 0 is some pipeline's stage."""
        by_name = {e.name: e for e in self.endpoints}
        names = [p.name for p in self.pipelines]
        dupes = sorted({n for n in names if names.count(n) > 1} | (set(names) & set(by_name)))
        if dupes:
            raise ValueError(f"pipelines: name(s) {', '.join(dupes)} used twice (pipelines and endpoints share names)")
        if self.pipelines and self.load.scenario != "server":
            raise ValueError(f"pipelines: need the open-loop server scenario (load.scenario = \"server\"), not "
                             f"{self.load.scenario!r}")
        staged = set()
        for i, pipeline in enumerate(self.pipelines):
            for k, stage in enumerate(pipeline.stages):
                where = f"pipelines[{i}].stages[{k}].endpoint"
                ep = by_name.get(stage.endpoint)
                if ep is None:
                    raise ValueError(f"{where}: no endpoint named {stage.endpoint!r}")
                kind = PIPELINE_KINDS.get(ep.protocol)
                if kind is None:
                    raise ValueError(f"{where}: {stage.endpoint!r} speaks {ep.protocol}; a stage embeds "
                                     f"(openai-embeddings), reranks (rerank) or generates (openai-chat, "
                                     f"openai-completions, triton-generate)")
                if ep.sessions is not None:
                    raise ValueError(f"{where}: {stage.endpoint!r} runs sessions (its arrivals start "
                                     "conversations); a stage sends one request")
                if kind == "generate" and k != len(pipeline.stages) - 1:
                    raise ValueError(f"{where}: a generate stage ends its pipeline (nothing reads its answer), "
                                     f"but stage {k + 1} follows it")
                staged.add(stage.endpoint)
        idle = [e.name for e in self.endpoints if e.weight == 0 and e.name not in staged]
        if idle:
            raise ValueError(f"endpoints: {', '.join(idle)} has weight 0 and is no pipeline's stage: it would be sent "
                             "nothing")

    def _streams_answer(self, pipeline: Pipeline) -> bool:
        """The pipeline's last stage streams tokens (its answer has a first token)."""
        last = next(e for e in self.endpoints if e.name == pipeline.stages[-1].endpoint)
        return last.generative and (last.prompts is None or last.prompts.stream)

    def stage_endpoints(self) -> set[str]:
        """The endpoints some pipeline's stage sends to."""
        return {s.endpoint for p in self.pipelines for s in p.stages}

    @property
    def arrival_weights(self) -> tuple[float, ...]:
        """The arrival process's split: each endpoint's weight, then each pipeline's (arrival index ≥ the number of
        endpoints: a pipeline)."""
        return tuple(e.weight for e in self.endpoints) + tuple(p.weight for p in self.pipelines)

    @property
    def uses_embedded(self) -> bool:
        return any(e.url == EMBEDDED for e in self.endpoints)

    @property
    def network_endpoints(self) -> list[Endpoint]:
        return [e for e in self.endpoints if e.protocol != "inprocess"]

    @property
    def kserve_endpoints(self) -> list[Endpoint]:
        """The KServe v2 endpoints (every one but the generative and the embeddings)."""
        return [e for e in self.endpoints if not e.generative and not e.pooling]

    @property
    def uses_triton(self) -> bool:
        return any(e.url == TRITON for e in self.endpoints)


class ProfileError(Exception):
    """A profile that cannot be used; the message names the file and each bad field."""


def _field_path(loc: tuple) -> str:
    out = ""
    for k, part in enumerate(loc):
        if part == "models" and k and isinstance(loc[k - 1], int):  # an endpoint's mix: as written (`model = [...]`)
            part = "model"
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def parse_profile(data: dict, source: str) -> Profile:
    """Validate a profile mapping; ProfileError lists `source: field.path: problem` lines."""
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-after")))
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key (not part of the profile schema)"
            elif err["type"] == "missing":
                message = "required field is missing"
            lines.append(f"{source}: {_field_path(loc)}: {message}")
        raise ProfileError("\n".join(lines)) from None


def load_profile(path: Path, overrides: Sequence[str] = ()) -> Profile:
    """Read and validate a TOML profile, with `overrides` (contract/overrides.py: `field.path=value`) applied
    before validation, so they are checked like the file; the profile records them."""
    from tailrace.contract.overrides import OverrideError, apply

    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such profile") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    if "overrides" in data:
        raise ProfileError(f"{path}: overrides: set by --set and TAILRACE_SET_*, not in a profile file")
    if not overrides:
        return parse_profile(data, str(path))
    try:
        data = apply(data, list(overrides))
    except OverrideError as exc:
        raise ProfileError(f"{path}: {exc}") from None
    return parse_profile(data | {"overrides": list(overrides)}, f"{path} (with {', '.join(overrides)})")


__all__ = [
    "Axis", "AxisRange", "Serve", "Sweep",
    "EMBEDDED", "TRITON", "INPROCESS", "STARTED_BY_RUN", "MASTER_CLOCK", "_Strict", "NAME", "GENERATIVE",
    "CHAT_APIS", "POOLING", "TLS_SCHEMES", "check_url", "DATATYPES", "_fixed", "TokenCount", "DeclaredTensor",
    "Check", "Tls", "Images", "Audio", "Structured", "Prompts", "Embeddings", "Rerank", "ThinkTime", "Sessions",
    "ModelShare", "STRUCTURED", "MIXABLE", "Cancel", "Endpoint", "Region", "Phase", "Trace", "Arrivals", "Load",
    "Clock", "Inputs", "PIPELINE_KINDS", "RAG_PROMPT", "PipelineStage", "Pipeline", "TOKEN_METRICS",
    "PIPELINE_METRICS", "Slo", "Embedded", "TritonLocal", "Capacity", "DecisionConstraints", "DECISION_METRICS",
    "Decision", "ColdStart", "Monitor", "OtelReceive", "OtelExport", "Otel", "ServerStats", "Generator", "Profile",
    "ProfileError", "_field_path", "parse_profile", "load_profile",
]
