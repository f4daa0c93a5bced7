"""Server-sent events (text/event-stream), parsed incrementally as a response's bytes arrive.

`SseParser.feed(data, read_ns)` takes each piece of the body as it is read, with the instant it was read (the
worker's monotonic clock, stamped before any parsing), and returns the events it completed: (read_ns of the
piece that completed the event, its data). Comment lines (`: ping`) and fields other than `data` are skipped;
several `data:` lines of one event are joined with "\\n", as the WHATWG definition says. An event that grows past
`max_event_bytes` without ending is an error (`SseError`), never a buffer that grows without bound.
"""
from __future__ import annotations

MAX_EVENT_BYTES = 1 << 20


class SseError(ValueError):
    """The stream is not a well-formed event stream (or an event is larger than allowed)."""


class SseParser:
    __slots__ = ("_buffer", "_pending_cr", "max_event_bytes", "comments")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buffer = b""
        self._pending_cr = False  # a "\r" at the end of the last piece: a "\n" may follow in the next one
        self.max_event_bytes = max_event_bytes
        self.comments = 0  # keep-alive pings seen

    def feed(self, data: bytes, read_ns: int) -> list[tuple[int, bytes]]:
        """The events completed by `data` (read at `read_ns`), in order."""
        if self._pending_cr and data.startswith(b"\n"):
            data = data[1:]
        self._pending_cr = data.endswith(b"\r")
        if b"\r" in data:  # CRLF and lone CR end lines too: one form, "\n"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer = self._buffer + data if self._buffer else data
        events = []
        start = 0
        while (end := buffer.find(b"\n\n", start)) >= 0:
            event = self._event(buffer[start:end])
            if event is not None:
                events.append((read_ns, event))
            start = end + 2
        self._buffer = buffer[start:]
        if len(self._buffer) > self.max_event_bytes:
            raise SseError(f"an event of more than {self.max_event_bytes} bytes without an end")
        return events

    def _event(self, block: bytes) -> bytes | None:
        if block.startswith(b"data: ") and b"\n" not in block:
            return block[6:]  # the usual event: one data line
        data = None
        for line in block.split(b"\n"):
            if not line:
                continue
            if line.startswith(b":"):
                self.comments += 1
                continue
            name, colon, value = line.partition(b":")
            if not colon:
                name, value = line, b""
            elif value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                data = value if data is None else data + b"\n" + value
        return data

    def close(self) -> bytes:
        """What is left unterminated when the stream ends (empty when it ended on an event boundary)."""
        rest, self._buffer = self._buffer.strip(), b""
        return rest
