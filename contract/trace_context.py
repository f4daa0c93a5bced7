"""W3C Trace Context (`traceparent`) generation and parsing. A one-shot request is a trace of its own; a session's
turns and a pipeline's stages share their session's trace (one per session of a run), under a session span that no
request sends but an OpenTelemetry export writes (analysis/otel/spans.py), which sends all requests or a `Sample`."""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


def new_ids() -> tuple[str, str]:
    """A random (trace_id, span_id) pair: 32 and 16 lowercase hex digits, never all zero."""
    while True:
        raw = os.urandom(24).hex()
        trace_id, span_id = raw[:32], raw[32:]
        if trace_id != _ZERO_TRACE and span_id != _ZERO_SPAN:
            return trace_id, span_id


def format_traceparent(trace_id: str, span_id: str, sampled: bool = True) -> str:
    """`00-<trace>-<span>-<flags>`."""
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"


def parse_traceparent(value: str | None) -> tuple[str, str] | None:
    """(trace_id, span_id) of a valid version-00 traceparent, else None (per W3C: ignore invalid)."""
    if not value:
        return None
    m = _TRACEPARENT.match(value.strip())
    if not m or m.group(1) == _ZERO_TRACE or m.group(2) == _ZERO_SPAN:
        return None
    return m.group(1), m.group(2)


def session_trace_id(run_id: str, session_id: int) -> str:
    """The trace every turn (stage) of one session (pipeline) of a run carries: 32 hex digits, never all zero."""
    digest = hashlib.blake2b(f"{run_id}:{session_id}".encode(), digest_size=16).hexdigest()
    return digest if digest != _ZERO_TRACE else "0" * 31 + "1"


def session_span_id(trace_id: str) -> str:
    """The session span's ID in its trace (the parent of each of its requests' spans)."""
    digest = hashlib.blake2b(trace_id.encode(), digest_size=8, person=b"session").hexdigest()
    return digest if digest != _ZERO_SPAN else "0" * 15 + "1"


class SampleError(ValueError):
    """A sample that cannot be read (the message names the part)."""


@dataclass(frozen=True)
class Sample:
    """Which requests an OpenTelemetry export sends: all of them, or the union of the slowest N (by latency from the
    intended send), the errors, and a share chosen by trace ID (the same requests in every export)."""

    all: bool = True
    slowest: int = 0
    errors: bool = False
    share: float = 0.0

    @classmethod
    def parse(cls, text: str) -> "Sample":
        """`all`, or a comma-joined set of `slowest:N`, `errors`, `share:F` (0 < F ≤ 1)."""
        if text.strip() == "all":
            return cls()
        slowest, errors, share = 0, False, 0.0
        for part in (p.strip() for p in text.split(",")):
            kind, _, value = part.partition(":")
            try:
                if kind == "slowest" and int(value) > 0:
                    slowest = int(value)
                elif kind == "errors" and not value:
                    errors = True
                elif kind == "share" and 0 < float(value) <= 1:
                    share = float(value)
                else:
                    raise ValueError
            except ValueError:
                raise SampleError(f"{part!r} is not all, slowest:N (N ≥ 1), errors or share:F (0 < F ≤ 1)") from None
        return cls(False, slowest, errors, share)
