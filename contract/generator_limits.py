"""What an invalid reason says when a run was INVALID for its generator, not its endpoint: the send lag's marks (a
generator saturated, paused or starved of its core: harness/worker/saturation.py writes one into each such reason)
and the bound on requests in flight. Capacity search and the sweep run such a trial again once."""
from __future__ import annotations

SATURATED, STALLED = "generator saturated", "generator paused or stalled"
GENERATOR_TIMING = (SATURATED, STALLED)
IN_FLIGHT = "requests in flight exceeds the bound"


def is_generator_timing(reason: str) -> bool:
    """Is this invalid reason the send lag's (a generator saturated, paused or starved of its core)?"""
    return any(mark in reason for mark in GENERATOR_TIMING)


def is_generator_limit(reason: str) -> bool:
    """The send lag's, or the bound on requests in flight the generator reached."""
    return is_generator_timing(reason) or IN_FLIGHT in reason
