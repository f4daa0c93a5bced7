"""Regions, the load and its phases, the arrival process, the clock and the inputs."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from tailrace.contract.profile.base import (
    EMBEDDED,
    NAME,
    _Strict,
)


class Region(_Strict):
    """A load-generator region: its share of the total rate and, for local emulation, its network and clock."""

    name: str = Field(pattern=NAME)
    share: float = Field(gt=0, le=1)
    delay_ms: float = Field(0, ge=0, le=5000, description="emulated one-way delay each direction")
    jitter_ms: float = Field(0, ge=0, le=1000)
    clock_skew_ms: float = Field(0, ge=-600_000, le=600_000, description="emulated worker clock error")
    workers: int = Field(1, ge=1, le=16)
    cluster: str | None = Field(None, pattern=NAME, description="deployments: the cluster this region's generators "
                                                                "run in (default: the region's name)")
    node_selector: dict[str, str] | None = Field(
        None, description="deployments: labels of the nodes this region's generators run on (default: "
                          "topology.kubernetes.io/region = the region's name)")


class Phase(_Strict):
    """A change of the rate, `at_s` seconds into the measured window: a step to `rate`, a ramp to `rate`
    over `duration_s`, or a spike of the current rate × `factor` for `duration_s`."""

    at_s: float = Field(ge=0)
    kind: Literal["step", "ramp", "spike"] = "step"
    rate: float | None = Field(None, gt=0, le=100_000)
    factor: float | None = Field(None, gt=0, le=1000, description="spike: rate multiplier")
    duration_s: float | None = Field(None, gt=0, description="ramp / spike length")

    @model_validator(mode="after")
    def _complete(self) -> "Phase":
        if self.kind in ("step", "ramp") and self.rate is None:
            raise ValueError(f"a {self.kind} phase needs rate")
        if self.kind in ("ramp", "spike") and self.duration_s is None:
            raise ValueError(f"a {self.kind} phase needs duration_s")
        if self.kind == "spike" and self.factor is None:
            raise ValueError("a spike phase needs factor")
        if self.kind == "step" and (self.factor is not None or self.duration_s is not None):
            raise ValueError("a step phase takes only at_s and rate")
        return self


class Trace(_Strict):
    """A file of arrival instants to replay (`load.arrivals.process = "trace"`)."""

    file: str = Field(min_length=1, description="the trace (relative paths: from where the worker runs)")
    format: Literal["auto", "csv", "jsonl", "azure", "mooncake"] = Field(
        "auto", description="csv / jsonl: `timestamp` (s) and optionally endpoint, region, input_tokens, "
                            "output_tokens, prompt_id; azure: the Azure LLM inference trace CSV (TIMESTAMP, "
                            "ContextTokens, GeneratedTokens); mooncake: JSONL (timestamp ms, input_length, "
                            "output_length, hash_ids); auto: by the header / first line")
    time_scale: float = Field(1.0, gt=0, le=1000, description="2 = twice as fast")
    start_s: float = Field(0, ge=0, description="skip the trace's first seconds (its own time)")
    window_s: float | None = Field(None, gt=0, description="replay this much of the trace (its own time)")
    loop: bool = Field(False, description="replay the window again until duration_s ends")


class Arrivals(_Strict):
    """The arrival process of the server scenario: one global process, drawn in advance from load.seed and split
    across regions by share (each arrival of the one sequence assigned with a seeded draw)."""

    process: Literal["poisson", "gamma", "onoff", "constant", "trace"] = Field(
        "poisson", description="poisson; gamma (renewal, gaps' coefficient of variation `cv`); onoff (a two-state "
                               "Markov-modulated Poisson process); constant (evenly spaced); trace (replay a file)")
    cv: float | None = Field(None, gt=0, le=20, description="gamma: the gaps' coefficient of variation (1 = Poisson, "
                                                           "> 1 burstier, < 1 smoother)")
    on_rate: float | None = Field(None, gt=0, le=100_000, description="onoff: requests/s while on")
    off_rate: float | None = Field(None, ge=0, le=100_000, description="onoff: requests/s while off")
    on_s: float | None = Field(None, gt=0, le=86_400, description="onoff: mean time on (exponential)")
    off_s: float | None = Field(None, gt=0, le=86_400, description="onoff: mean time off (exponential)")
    trace: Trace | None = None

    @model_validator(mode="after")
    def _complete(self) -> "Arrivals":
        need = {"gamma": ("cv",), "onoff": ("on_rate", "off_rate", "on_s", "off_s"), "trace": ("trace",)}
        missing = [f for f in need.get(self.process, ()) if getattr(self, f) is None]
        if missing:
            raise ValueError(f"the {self.process} process needs {', '.join(missing)}")
        extra = [f for f in ("cv", "on_rate", "off_rate", "on_s", "off_s", "trace")
                 if getattr(self, f) is not None and f not in need.get(self.process, ())]
        if extra:
            raise ValueError(f"{', '.join(extra)}: not a setting of the {self.process} process")
        return self

    @property
    def mean_rate(self) -> float | None:
        """onoff: its long-run rate (the states' rates weighted by their mean sojourns)."""
        on_rate, off_rate, on_s, off_s = self.on_rate, self.off_rate, self.on_s, self.off_s
        if self.process != "onoff" or on_rate is None or off_rate is None or on_s is None or off_s is None:
            return None
        return (on_rate * on_s + off_rate * off_s) / (on_s + off_s)


class Load(_Strict):
    """What traffic to send, after MLPerf Inference's scenarios."""

    scenario: Literal["server", "single-stream", "multi-stream", "offline"] = Field(
        "server", description="server: Poisson at `rate`; single-stream: one request at a time per region; "
                              "multi-stream: a query of samples_per_query every interval_ms per region; "
                              "offline: batches of offline_batch as fast as the endpoint takes them")
    rate: float | None = Field(None, gt=0, le=100_000, description="server: total arrival rate, requests/s")
    duration_s: float = Field(gt=0, le=86_400)
    warmup_s: float = Field(0, ge=0, le=3600)
    seed: int = Field(0, ge=0, lt=2**63, description="the arrival process's seed (0 ≤ seed < 2^63)")
    phases: list[Phase] = Field(default_factory=list)
    arrivals: Arrivals = Field(default_factory=Arrivals, description="server: the arrival process (default Poisson)")
    samples_per_query: int = Field(8, ge=1, le=1024, description="multi-stream: samples (batch) per query")
    interval_ms: float = Field(50, gt=0, le=60_000, description="multi-stream: query interval")
    offline_batch: int = Field(256, ge=1, le=4096, description="offline: samples per request")
    offline_concurrency: int = Field(2, ge=1, le=64, description="offline: requests in flight per worker")

    @field_validator("phases")
    @classmethod
    def _ordered(cls, v: list[Phase]) -> list[Phase]:
        if any(b.at_s <= a.at_s for a, b in zip(v, v[1:])):
            raise ValueError("phases must have strictly increasing at_s")
        for a, b in zip(v, v[1:]):
            if a.duration_s is not None and a.at_s + a.duration_s > b.at_s:
                raise ValueError(f"the {a.kind} at {a.at_s:g} s lasts past the next phase at {b.at_s:g} s")
        return v

    @model_validator(mode="after")
    def _scenario(self) -> "Load":
        process = self.arrivals.process
        if self.scenario != "server" and process != "poisson":
            raise ValueError(f"arrivals: only the server scenario has an arrival process, not {self.scenario}")
        if process in ("onoff", "trace"):
            if self.rate is not None or self.phases:
                raise ValueError(f"rate, phases: the {process} process sets its own rate "
                                 f"({'on_rate / off_rate' if process == 'onoff' else 'the trace'})")
        elif self.scenario == "server" and self.rate is None:
            raise ValueError("rate: the server scenario needs a rate (requests/s)")
        if self.scenario != "server" and self.phases:
            raise ValueError(f"phases: only the server scenario has phases, not {self.scenario}")
        if any(p.at_s >= self.duration_s for p in self.phases):
            raise ValueError("phases: every phase must start before duration_s")
        return self


class Clock(_Strict):
    servers: list[str] = Field(default_factory=lambda: [EMBEDDED],
                               description="host:port NTP servers, 'embedded' (tailrace run's SNTP reference) "
                                           "or 'master' (tailrace master's, for workers on other hosts)")
    interval_s: float = Field(5, gt=0, le=3600)
    packets: int = Field(4, ge=1, le=16, description="packets per sample; the minimum-delay one is kept")


class Inputs(_Strict):
    """How samples are chosen and bounded, for every endpoint."""

    dataset: str | None = Field(None, description="older profiles: a data file relative to embedded.models_dir, "
                                                  "the default of every endpoint's `data`")
    selection: Literal["random", "sequential"] = "random"
    batch_size: int = Field(1, ge=1, le=1024, description="default of every endpoint's batch_size")
    max_samples: int = Field(1024, ge=1, le=1_000_000, description="samples read from a data file (or made up "
                                                                   "for random / zero), cycled through")
    max_encoded_mb: float = Field(64, gt=0, description="bound on one endpoint's pre-encoded requests per worker; "
                                                         "fewer samples are kept when they would exceed it")
