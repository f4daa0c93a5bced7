"""The run record's verdict on how a run went: planned vs sent."""
from __future__ import annotations

from harness.orchestration.run_record import shortfalls


def test_a_worker_that_sent_less_than_planned_is_named_with_the_numbers():
    summaries = {"eu-w0": {"planned": 1564, "sent": 339}, "us-w0": {"planned": 1623, "sent": 1623},
                 "ap-w0": {"planned": 10_000, "sent": 9_995}}  # within the 0.1% tolerance
    assert shortfalls(summaries) == ["eu-w0: sent 339 of 1,564 planned requests (21.7%)"]


def test_a_one_request_difference_is_tolerated_at_any_size():
    assert shortfalls({"w": {"planned": 10, "sent": 9}}) == []
    assert shortfalls({"w": {"planned": 10, "sent": 8}}) == ["w: sent 8 of 10 planned requests (80.0%)"]
