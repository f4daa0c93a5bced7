"""What is drawn for each request from the seed and its place in the arrival process: whether its client abandons
it, and when (the profile's `cancel`); which model of an endpoint's mix it asks for (a weighted `model` list).

A request's draw depends only on load.seed, its endpoint and its place in the arrival process (and a session's turn,
a pipeline's stage): the same requests are abandoned, at the same time or token, and ask for the same model, in every
run of the seed and in every variant of a comparison. The draw is a 64-bit mix of those numbers (a few integer
operations a request); a drawn time or token count is one of a table drawn once from the declared distribution.
"""
from __future__ import annotations

from bisect import bisect_right

import numpy as np

from tailrace.contract.profile import Cancel, ModelShare
from tailrace.harness.client.outcome import CancelAt
from tailrace.harness.workload.prompts import draw_counts

TABLE = 4096  # drawn times / token counts a plan picks from
_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def mix64(x: int) -> int:
    """SplitMix64's finaliser: a well-spread 64-bit hash of `x` (pure)."""
    x = (x + _GOLDEN) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


class CancelPlan:
    """One endpoint's declared cancellations, drawn request by request."""

    def __init__(self, cancel: Cancel, seed: int, endpoint_index: int) -> None:
        self.kind = cancel.after
        self.threshold = int(cancel.share * (1 << 64))  # a request's hash below it: abandoned
        self.salt = mix64(seed ^ mix64(endpoint_index + 0xCA11CE1))
        spec = cancel.after_ms if cancel.after == "time" else cancel.after_tokens
        rng = np.random.default_rng([seed, endpoint_index, 0xCA11CE1])
        self.values: list[int] = draw_counts(spec, TABLE, rng).tolist() if spec is not None else [1]

    def draw(self, arrival_index: int, step: int, intended_mono: int) -> CancelAt | None:
        """The request at `arrival_index` in the arrival process (its `step`: a session's turn, a pipeline's stage;
        0 for a lone request) is abandoned when (None: it is not)."""
        h = mix64(self.salt ^ mix64((arrival_index << 12) ^ step))
        if h >= self.threshold:
            return None
        value = self.values[mix64(h) % TABLE % len(self.values)]
        if self.kind == "time":
            return CancelAt("time", intended_mono + value * 1_000_000, 0)
        return CancelAt(self.kind, -1, 1 if self.kind == "first_token" else value)


class ModelMix:
    """One endpoint's weighted models (LoRA adapters on one server, models behind one gateway), drawn per request or
    per session."""

    def __init__(self, models: list[ModelShare], seed: int, endpoint_index: int, per_session: bool) -> None:
        self.names = [m.name for m in models]
        weights = np.array([m.weight for m in models], dtype=float)
        edges = np.cumsum(weights / weights.sum())[:-1]
        self.bounds = [int(e * (1 << 64)) for e in edges]  # a hash below bounds[k]: model k (the rest: the last)
        self.salt = mix64(seed ^ mix64(endpoint_index + 0x10DE1))
        self.per_session = per_session

    def draw(self, arrival_index: int, step: int) -> str:
        """The model the request at `arrival_index` (its `step`: a session's turn, a pipeline's stage) asks for; a
        session's every turn the same one where the mix is drawn per session."""
        h = mix64(self.salt ^ mix64((arrival_index << 12) ^ (0 if self.per_session else step)))
        return self.names[bisect_right(self.bounds, h)]
