"""A worker that waits for its chunk writer says so when the wait was long: the whole worker waits (no send, no
heartbeat), and a run's stall is then explained in its worker's log, not only measured."""
from __future__ import annotations

from tailrace.harness.spool import chunk_shipping
from tailrace.harness.spool.chunk_shipping import WriterChild


def a_writer(behind: int, waited_s: float, catches_up: bool = True) -> WriterChild:
    writer = WriterChild.__new__(WriterChild)  # no process: catch_up is the part replaced
    writer.outstanding, writer.waited_s = behind, 0.0
    writer.gated = False

    def catch_up(most: int, timeout_s: float) -> bool:
        writer.waited_s = waited_s
        if catches_up:
            writer.outstanding = most
        return catches_up
    writer.catch_up = catch_up
    return writer


def test_a_long_wait_for_the_writer_is_said_with_its_seconds_and_chunks():
    said: list[str] = []
    assert a_writer(5, 2.34).keep_up(3, 5.0, said.append)
    assert said == ["chunk writer: the worker waited 2.3 s for it to write 3 chunks (an idle-class process: the "
                    "machine's other work came first)"]


def test_a_short_wait_or_none_is_not_said():
    said: list[str] = []
    assert a_writer(5, chunk_shipping.SLOW_WAIT_S * 0.9).keep_up(3, 5.0, said.append)
    assert a_writer(2, 9.0).keep_up(3, 5.0, said.append)  # not behind: no wait at all
    assert said == []
