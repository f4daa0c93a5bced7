"""The one inference pipeline behind both protocols (endpoints/kserve/http_app.py and endpoints/kserve/grpc_service.py):
admit (model found, version checked, request counted, size bounded), decode (the protocol's codec), run on the
model's scheduler, time (the response's timing parameters), or record the failure. Each protocol only reads
its request and writes its response."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tailrace.endpoints.kserve.codec import DecodedRequest
from tailrace.endpoints.models.model_config import ModelSpec
from tailrace.endpoints.serving.core import InferenceServer, RequestClock, timing_parameters
from tailrace.endpoints.serving.errors import InferenceError
from tailrace.endpoints.serving.scheduler import ModelScheduler, Timings


@dataclass
class InferCall:
    """One inference request on its way through the pipeline."""

    server: InferenceServer
    name: str
    protocol: str  # "http" | "grpc": the statistics count requests per protocol
    clock: RequestClock
    trace_id: str | None
    timings: Timings = field(default_factory=Timings)
    spec: ModelSpec | None = None
    scheduler: ModelScheduler | None = None
    decoded: DecodedRequest | None = None

    def admit(self, version: str | None) -> None:
        """Find the model (NOT_FOUND), check the version, count the request."""
        self.spec = self.server.spec(self.name)
        self.server.check_version(self.name, version)
        self.scheduler = self.server.scheduler(self.name)
        self.scheduler.statistics.count_request(self.protocol)

    def bound(self, size: int, what: str) -> None:
        """Refuse a request larger than the server's limit (HTTP 400, INVALID_ARGUMENT): the one place the body
        limit is enforced, for the HTTP body (declared and as it arrives) and gRPC's request tensors alike."""
        limit = self.server.options.max_body_bytes
        if size > limit:
            raise InferenceError(f"{what} of {size} bytes exceeds the limit of {limit} bytes")

    def decode(self, codec: Callable[[ModelSpec], DecodedRequest]) -> DecodedRequest:
        self.decoded = codec(self.spec)
        return self.decoded

    def _args(self) -> tuple:
        return self.decoded.inputs, self.timings, self.decoded.batch_size, self.clock.receive_mono_ns

    async def run_async(self) -> dict[str, np.ndarray]:
        """Queue and run on the event loop (HTTP)."""
        return await self.scheduler.infer_async(*self._args())

    def run_blocking(self) -> dict[str, np.ndarray]:
        """Queue and run on the calling thread (gRPC)."""
        return self.scheduler.infer_blocking(*self._args())

    def parameters(self) -> dict:
        """The response's timing parameters (queue, compute, receive / send stamps, trace ID)."""
        return timing_parameters(self.clock, self.timings, self.trace_id)

    def failed(self, error: InferenceError) -> None:
        """Count the failure in the model's statistics and metrics."""
        self.server.record_failure(self.name, self.clock, error)
