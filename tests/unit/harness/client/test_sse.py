"""Server-sent events parsed as the bytes arrive: events, comments, split pieces, line endings, oversize events."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailrace.harness.client.streams.sse import SseError, SseParser

STREAM = (b": ping\n\ndata: {\"a\": 1}\n\nevent: x\nid: 7\ndata: line one\ndata: line two\n\n"
          b"data:[DONE]\n\n")
EVENTS = [b'{"a": 1}', b"line one\nline two", b"[DONE]"]


def test_events_comments_and_fields():
    parser = SseParser()
    assert [e for _, e in parser.feed(STREAM, 5)] == EVENTS
    assert parser.comments == 1 and parser.close() == b""


def test_an_event_is_stamped_with_the_read_that_completed_it():
    parser = SseParser()
    assert parser.feed(b"data: {\"a\"", 10) == []
    assert parser.feed(b": 1}\n", 20) == []
    assert parser.feed(b"\ndata: x\n\ndata: y", 30) == [(30, b'{"a": 1}'), (30, b"x")]
    assert parser.close() == b"data: y"  # a stream cut inside an event


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_crlf_and_cr_end_lines_too(newline):
    parser = SseParser()
    assert [e for _, e in parser.feed(STREAM.replace(b"\n", newline), 1)] == EVENTS


def test_a_crlf_split_between_two_reads_is_one_line_end():
    parser = SseParser()
    assert parser.feed(b"data: a\r\n\r", 1) == [(1, b"a")]  # a lone CR ends a line: the event is complete
    assert parser.feed(b"\ndata: b\r\n\r\n", 2) == [(2, b"b")]  # ... and the LF after it is not a blank line


def test_an_event_larger_than_allowed_is_an_error():
    parser = SseParser(max_event_bytes=100)
    with pytest.raises(SseError, match="more than 100 bytes"):
        parser.feed(b"data: " + b"x" * 200, 1)


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=12, unique=True))
def test_any_split_of_the_stream_gives_the_same_events(cuts):
    parser = SseParser()
    bounds = [0, *sorted(cuts), len(STREAM)]
    events = []
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        events += [e for _, e in parser.feed(STREAM[a:b], i)]
    assert events == EVENTS
