"""What a Triton generate-extension stream (POST /v2/models/{m}/generate_stream) says, event by event.

Rules (docs/METHODS.md, "Streams"): every event is one response of the model, `data: {"model_name", "model_version",
"text_output", …}`; an event whose `text_output` is not empty carries tokens — as many as the output field the
profile names says (`token_count_output`, e.g. the vLLM backend's `num_output_tokens`), else one; `data: {"error":
…}` inside the 200 stream is a failure with its message; there is no [DONE]: the stream is complete when the response
ends (its last chunk), and a connection that closes before that was cut (the sender says so).
"""
from __future__ import annotations

from array import array

import orjson

from tailrace.harness.client.streams.openai_stream import COMPLETE, ERROR_EVENT, StreamProtocolError, record_token_event


class TritonGenerateStream:
    """The state of one generate_stream response, fed its events as they arrive (instants: monotonic ns); the same
    surface as OpenAIStream."""

    __slots__ = ("count_output", "first_token_ns", "last_token_ns", "event_ns", "event_tokens", "input_tokens",
                 "finish_reason", "error", "text_bytes", "preview", "_counted", "_missing", "texts")

    def __init__(self, count_output: str | None = None) -> None:
        self.count_output = count_output
        self.first_token_ns = -1
        self.last_token_ns = -1
        self.event_ns = array("q")
        self.event_tokens = array("H")
        self.input_tokens = -1  # the generate extension reports none
        self.finish_reason = ""
        self.error = ""
        self.text_bytes = 0
        self.preview = ""
        self.texts: list[str] = []
        self._counted = 0
        self._missing = count_output is None  # some token event lacked the count output

    def feed(self, read_ns: int, data: bytes) -> None:
        """One server-sent event's data, arrived at `read_ns`."""
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise StreamProtocolError(f"an event that is not JSON ({exc}): {data[:80]!r}") from None
        if not isinstance(event, dict):
            raise StreamProtocolError(f"an event that is not a JSON object: {data[:80]!r}")
        if "error" in event:
            self.add(read_ns, "", None, "", str(event["error"]))
            return
        text = event.get("text_output", "")
        if isinstance(text, list):  # a BYTES output of one element
            text = text[0] if text else ""
        if not isinstance(text, str):
            raise StreamProtocolError(f"an event without text_output: {data[:80]!r}")
        reported = event.get(self.count_output) if self.count_output is not None else None
        if isinstance(reported, list):
            reported = reported[0] if reported else None
        reason = event.get("finish_reason")
        self.add(read_ns, text, reported, reason if isinstance(reason, str) else "", "")

    def add(self, read_ns: int, text: str, reported, finish_reason: str = "", error: str = "") -> None:
        """One response of the model (an event, or a gRPC stream's message): its text, the token count it reports
        (None: not reported), its finish reason, or an error."""
        if error:
            self.error = error[:200]
            return
        if finish_reason:
            self.finish_reason = finish_reason[:32]
        if not text:
            return
        tokens = 1
        if self.count_output is not None:
            if isinstance(reported, int) and not isinstance(reported, bool) and reported >= 1:
                tokens = reported
            else:
                self._missing = True
        record_token_event(self, read_ns, text, tokens)

    @property
    def output_tokens(self) -> int:
        return self._counted

    @property
    def count_source(self) -> str:
        """"output" when every token event carried the named count output, else "events"."""
        return "events" if self._missing or not self._counted else "output"

    def outcome(self) -> str:
        """How a stream that reached its end finished: complete or error_event (no [DONE] in this protocol)."""
        return ERROR_EVENT if self.error else COMPLETE
