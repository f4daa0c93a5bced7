"""The resolved run plan: every setting of a run, normalised once (after LoadGen's TestSettings →
TestSettingsInternal), written once to plan.json and into the manifest, and read by the Locust master, every
worker and the analysis. Nobody downstream re-spells a profile default or re-resolves an address.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from tailrace.contract.layout import RunLayout, write_atomic
from tailrace.contract.profile import EMBEDDED, INPROCESS, TRITON, Endpoint, Profile, ProfileError, parse_profile
from tailrace.contract.rates import describe_arrivals
from tailrace.contract.requests import RequestSpec

PLAN_VERSION = 1
EndpointKind = Literal["embedded", "triton", "remote", "inprocess"]
CHECK_MAX_S = 10.0  # a check before the run (an endpoint's models, metadata, readiness) waits at most this long
POOL_SPARE = 100  # connections an open-loop pool keeps beyond the requests in flight: it never caps concurrency
WARM_MAX = 16  # connections opened before the run, at most


@dataclass(frozen=True)
class EndpointTimeouts:
    """An endpoint's timeouts in seconds, resolved once from the profile's milliseconds: the whole request, its
    first token, and the longest silence inside a stream once it has begun (None: bounded by the whole only)."""

    total_s: float
    first_token_s: float | None = None
    stall_s: float | None = None

    @classmethod
    def of(cls, endpoint: Endpoint) -> EndpointTimeouts:
        def seconds(ms: float | None) -> float | None:
            return ms / 1000 if ms else None

        return cls(endpoint.timeout_ms / 1000, seconds(endpoint.ttft_timeout_ms), seconds(endpoint.stall_timeout_ms))

    @property
    def check_s(self) -> float:
        """How long a check before the run waits: the request's timeout, at most CHECK_MAX_S."""
        return min(CHECK_MAX_S, self.total_s)

    def describe(self) -> str:
        parts = [f"timeout {self.total_s:g} s"]
        parts += [f"first token {self.first_token_s:g} s"] if self.first_token_s else []
        parts += [f"stall {self.stall_s:g} s"] if self.stall_s else []
        return ", ".join(parts)


@dataclass(frozen=True)
class PoolLimits:
    """A sender's keep-alive connections: at most `connections`, `warm` of them opened before the run."""

    connections: int
    warm: int

    @classmethod
    def sized(cls, connections: int) -> PoolLimits:
        return cls(connections, min(WARM_MAX, connections))

    @classmethod
    def open_loop(cls, max_in_flight: int) -> PoolLimits:
        """An open loop's pool: its requests in flight and POOL_SPARE more, so the pool never caps concurrency."""
        return cls.sized(max_in_flight + POOL_SPARE)


class RunPlan(BaseModel):
    """One run, resolved: the profile with every default filled and the started servers' addresses in place
    of 'embedded' / 'triton', where each region reaches each endpoint, the clock references, and the lead
    time between the plan and the start instant."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan_version: int = PLAN_VERSION
    run_id: str
    run_dir: str
    profile: Profile
    endpoint_kinds: dict[str, EndpointKind]
    region_urls: dict[str, dict[str, str]] = {}
    ntp_servers: list[str]
    models_dir: str
    lead_s: float
    requests: dict[str, RequestSpec] = {}  # per endpoint: the request resolved from the model before the start
    model_inputs: dict[str, list[str]] = {}  # per triton-generate endpoint: its model's input names (metadata)
    data_root: str = ""  # relative data paths are read from here (the orchestrator's directory; "" = each worker's)

    # -- derived settings (one definition each) ----------------------------------------------------------
    @property
    def samples_per_request(self) -> int:
        """The scenario's query / batch size, else the profile's inputs.batch_size."""
        load = self.profile.load
        return {"multi-stream": load.samples_per_query, "offline": load.offline_batch}.get(
            load.scenario, self.profile.inputs.batch_size)

    def batch_size(self, endpoint: Endpoint) -> int:
        """Rows per request of `endpoint`: the scenario's query / batch size, else its resolved request's."""
        load = self.profile.load
        if load.scenario in ("multi-stream", "offline"):
            return self.samples_per_request
        spec = self.requests.get(endpoint.name)
        return spec.batch_size if spec is not None else (endpoint.batch_size or self.profile.inputs.batch_size)

    def data_source(self, endpoint: Endpoint) -> str:
        """'random', 'zero' or a data file's path (older profiles: inputs.dataset under the models directory)."""
        if endpoint.data is not None:
            if endpoint.data in ("random", "zero") or Path(endpoint.data).is_absolute() or not self.data_root:
                return endpoint.data
            return str(Path(self.data_root) / endpoint.data)
        dataset = self.profile.inputs.dataset
        return str(Path(self.models_dir) / dataset) if dataset else "random"

    @property
    def drain_s(self) -> float:
        """How long a worker waits for its last responses: the longest endpoint timeout + 2 s."""
        return max(e.timeout_ms for e in self.profile.endpoints) / 1000 + 2

    @property
    def run_seconds(self) -> float:
        """How long the Locust master runs: lead + warm-up + duration + drain."""
        load = self.profile.load
        return self.lead_s + load.warmup_s + load.duration_s + self.drain_s + 3

    @property
    def pool_limits(self) -> PoolLimits:
        """Each sender's connection pool in this run."""
        return PoolLimits.open_loop(self.profile.generator.max_in_flight)

    def endpoint_url(self, region: str, endpoint: Endpoint) -> str:
        """Where `region` sends `endpoint`'s requests (through its delay proxy when it has one)."""
        return self.region_urls.get(region, {}).get(endpoint.name, endpoint.url)

    def effective_settings(self) -> list[str]:
        """The settings that shape the numbers, one line each, for the log (LoadGen's LogEffectiveSettings)."""
        p, load, gen = self.profile, self.profile.load, self.profile.generator
        arrivals = describe_arrivals(load) if load.scenario == "server" else "closed loop"
        lines = [f"run {self.run_id}: scenario {load.scenario}, {arrivals}, seed {load.seed}, "
                 f"warm-up {load.warmup_s:g} s, duration {load.duration_s:g} s, {len(load.phases)} phase change(s)",
                 f"samples per request {self.samples_per_request}, selection {p.inputs.selection}, at most "
                 f"{p.inputs.max_samples} samples / {p.inputs.max_encoded_mb:g} MB of requests per endpoint",
                 f"generator: send-lag threshold {gen.send_lag_p99_ms:g} ms per {gen.window_s:g} s window, stall "
                 f"{gen.stall_max_ms:g} ms, behind at most {gen.behind_max_s:g} s, spin {gen.spin_ms:g} ms, chunks of "
                 f"{gen.chunk_rows} rows / {gen.chunk_seconds:g} s written together every {gen.file_seconds:g} s, "
                 f"max in flight {gen.max_in_flight} (connections: "
                 f"{self.pool_limits.connections} a sender, {self.pool_limits.warm} opened before the start)",
                 f"clock: {', '.join(self.ntp_servers) or 'none'} every {p.clock.interval_s:g} s, "
                 f"{p.clock.packets} packets"]
        for e in p.endpoints:
            lines.append(f"endpoint {e.name}: {e.protocol} {e.url} model {e.model} ({self.endpoint_kinds[e.name]}), "
                         f"weight {e.weight:g}, {EndpointTimeouts.of(e).describe()}, data {self.data_source(e)}")
            spec = self.requests.get(e.name)
            if spec is not None:
                lines.append(f"  request ({spec.source}): {'; '.join(spec.describe())}")
        for r in p.regions:
            via = ", ".join(f"{k}={v}" for k, v in self.region_urls.get(r.name, {}).items()) or "direct"
            lines.append(f"region {r.name}: share {r.share:g}, {r.workers} worker(s), delay {r.delay_ms:g}±"
                         f"{r.jitter_ms:g} ms, skew {r.clock_skew_ms:g} ms, via {via}")
        return lines

    # -- the file --------------------------------------------------------------------------------------
    def write(self, layout: RunLayout) -> Path:
        """plan.json, written once (temporary name + rename)."""
        return write_atomic(layout.plan, self.model_dump_json(indent=2))

    @classmethod
    def read(cls, path: Path) -> "RunPlan":
        """Read plan.json; ProfileError names the file and the field."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text()), str(path))
        except (OSError, json.JSONDecodeError) as exc:
            raise ProfileError(f"{path}: cannot read the run plan: {exc}") from None

    @classmethod
    def from_dict(cls, data: dict, source: str) -> "RunPlan":
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            raise ProfileError(f"{source}: {where}: {err['msg']}") from None

    @classmethod
    def from_manifest(cls, manifest: dict, source: str) -> "RunPlan":
        """The plan of a run directory's manifest. Manifests written before plan.json existed hold only the
        profile: it is resolved here, through the same schema, so defaults still come from one place."""
        if "plan" in manifest:
            return cls.from_dict(manifest["plan"], f"{source}: plan")
        profile = parse_profile(manifest.get("profile") or {}, f"{source}: profile")
        return unresolved_plan(profile, manifest.get("run_id") or "", "")


def endpoint_kind(endpoint: Endpoint) -> EndpointKind:
    """Who serves an endpoint: a server tailrace starts, a remote one, or the worker itself."""
    if endpoint.url == INPROCESS:
        return "inprocess"
    if endpoint.url == EMBEDDED:
        return "embedded"
    return "triton" if endpoint.url == TRITON else "remote"


def unresolved_plan(profile: Profile, run_id: str, run_dir: str, models_dir: str | None = None,
                    lead_s: float = 0.0, data_root: str = "") -> RunPlan:
    """A plan whose endpoints keep the profile's URLs (no servers started, no proxies, no requests resolved)."""
    return RunPlan(run_id=run_id, run_dir=run_dir, profile=profile,
                   endpoint_kinds={e.name: endpoint_kind(e) for e in profile.endpoints},
                   ntp_servers=list(profile.clock.servers), models_dir=models_dir or profile.embedded.models_dir,
                   lead_s=lead_s, data_root=data_root)
