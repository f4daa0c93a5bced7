"""What an Anthropic Messages stream (POST /v1/messages with `stream: true`) says, event by event — the event stream
Anthropic defines and vLLM's /v1/messages and LiteLLM-style gateways serve.

Rules (docs/METHODS.md, "Streams"), as for an OpenAI stream:
- `message_start` carries the prompt's usage (`input_tokens`, `cache_read_input_tokens`);
- a token event is a `content_block_delta`: a `text_delta` (the answer), a `thinking_delta` (reasoning, counted apart
  as a chat stream's reasoning_content is), an `input_json_delta` (a tool use's arguments: an answer token, its
  block's `content_block_start` naming the tool); each carries one token, the output tokens being the
  `message_delta`'s final `usage.output_tokens` (`final_usage`), else the events counted;
- `message_delta` carries the stop reason; `message_stop` ends the stream; `ping` and `content_block_start` /
  `_stop` carry no token; an `error` event is a failure with its message; an event of a type this list does not
  hold is skipped and counted (`unknown_events`); a stream that closes without `message_stop` was cut.
"""
from __future__ import annotations

from tailrace.harness.client.streams.openai_stream import StreamProtocolError, TokenStream, typed_event

_QUIET = frozenset({"ping", "content_block_stop"})


class AnthropicStream(TokenStream):
    """The state of one Messages stream, fed its events' data as they are read."""

    __slots__ = ()

    def feed(self, read_ns: int, data: bytes) -> None:
        event, kind = typed_event(data)
        if kind == "content_block_delta":
            self._delta(read_ns, event.get("delta"), event.get("index", 0), data)
        elif kind == "message_start":
            message = event.get("message")
            self._usage(message.get("usage") if isinstance(message, dict) else None, final=False)
        elif kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                self.tool_calls[int(event.get("index", 0))] = {"id": str(block.get("id") or ""),
                                                               "name": str(block.get("name") or ""), "arguments": ""}
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self.finish_reason = str(delta["stop_reason"])[:32]
            self._usage(event.get("usage"), final=True)
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error = event.get("error")
            self.error = str((error.get("message") if isinstance(error, dict) else error) or "error event")[:200]
        elif kind not in _QUIET:
            self.unknown_events += 1

    def _delta(self, read_ns: int, delta, index, data: bytes) -> None:
        if not isinstance(delta, dict):
            raise StreamProtocolError(f"a content_block_delta without a delta: {data[:80]!r}")
        kind = delta.get("type")
        if kind == "text_delta":
            text, reasoning = delta.get("text"), False
        elif kind == "thinking_delta":
            text, reasoning = delta.get("thinking"), True
        elif kind == "input_json_delta":
            text, reasoning = delta.get("partial_json"), False
            call = self.tool_calls.setdefault(int(index or 0), {"id": "", "name": "", "arguments": ""})
            call["arguments"] += text if isinstance(text, str) else ""
        elif kind == "signature_delta":
            return
        else:
            self.unknown_events += 1
            return
        if not isinstance(text, str):
            raise StreamProtocolError(f"a {kind} whose text is not a string: {data[:80]!r}")
        if text:
            self.token(read_ns, text, 1, reasoning)

    def _usage(self, usage, final: bool) -> None:
        """A usage's counts; the output tokens only from message_delta's (message_start's are no count of it)."""
        if not isinstance(usage, dict):
            return
        prompt, output = usage.get("input_tokens"), usage.get("output_tokens")
        if isinstance(prompt, int) and not isinstance(prompt, bool):
            self.input_tokens = prompt
        cached = usage.get("cache_read_input_tokens")
        if isinstance(cached, int) and not isinstance(cached, bool):
            self.cached_tokens = cached
        if final and isinstance(output, int) and not isinstance(output, bool):
            self.usage_tokens = output
