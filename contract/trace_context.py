"""W3C Trace Context (`traceparent`) generation and parsing."""
from __future__ import annotations

import os
import re

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
