"""What an OpenAI Responses stream (POST /v1/responses with `stream: true`) says, event by event — OpenAI's event
types as vLLM's /v1/responses serves them.

Rules (docs/METHODS.md, "Streams"), as for a chat stream:
- a token event is a `response.output_text.delta` (the answer), a `response.reasoning_text.delta` or
  `response.reasoning_summary_text.delta` (reasoning, counted apart), or a `response.function_call_arguments.delta`
  (a function call's arguments: an answer token, named by its `response.output_item.added`); one token each, the
  output tokens being `response.completed`'s `usage.output_tokens` (`final_usage`), else the events counted;
- `response.completed` (or `response.incomplete`: the output hit `max_output_tokens`) ends the stream with the usage —
  `input_tokens`, `input_tokens_details.cached_tokens`, `output_tokens_details.reasoning_tokens` — and the status
  (the finish reason); `response.failed` and an `error` event are failures with their message; the other
  `response.*` events carry no token; an event of another type is skipped and counted (`unknown_events`); a stream
  that closes without its final event was cut. `response_id` (from `response.created`) is what a next turn names as
  its `previous_response_id`.
"""
from __future__ import annotations

from tailrace.harness.client.streams.openai_stream import StreamProtocolError, TokenStream, typed_event

_ANSWER = frozenset({"response.output_text.delta", "response.function_call_arguments.delta",
                     "response.refusal.delta"})
_REASONING = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
_FINAL = frozenset({"response.completed", "response.incomplete"})


class ResponsesStream(TokenStream):
    """The state of one Responses stream, fed its events' data as they are read."""

    __slots__ = ("response_id",)

    def __init__(self, chat: bool = True) -> None:
        super().__init__(chat)
        self.response_id = ""

    def feed(self, read_ns: int, data: bytes) -> None:
        event, kind = typed_event(data)
        if kind in _ANSWER or kind in _REASONING:
            text = event.get("delta")
            if not isinstance(text, str):
                raise StreamProtocolError(f"a {kind} whose delta is not a string: {data[:80]!r}")
            if kind == "response.function_call_arguments.delta":
                call = self.tool_calls.setdefault(int(event.get("output_index", 0)), {"id": "", "name": "",
                                                                                      "arguments": ""})
                call["arguments"] += text
            if text:
                self.token(read_ns, text, 1, kind in _REASONING)
        elif kind in _FINAL:
            self._final(event.get("response"))
            self.done = True
        elif kind == "response.created":
            response = event.get("response")
            self.response_id = str(response.get("id") or "") if isinstance(response, dict) else ""
        elif kind == "response.output_item.added":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                self.tool_calls[int(event.get("output_index", 0))] = {
                    "id": str(item.get("call_id") or item.get("id") or ""), "name": str(item.get("name") or ""),
                    "arguments": ""}
        elif kind == "response.failed":
            response = event.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            self.error = str((error.get("message") if isinstance(error, dict) else error) or "response.failed")[:200]
        elif kind == "error":
            self.error = str(event.get("message") or event.get("error") or "error event")[:200]
        elif not kind.startswith("response."):
            self.unknown_events += 1

    def _final(self, response) -> None:
        if not isinstance(response, dict):
            return
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        self.finish_reason = str(reason or response.get("status") or "completed")[:32]
        usage = response.get("usage")
        if not isinstance(usage, dict):
            return
        prompt, output = usage.get("input_tokens"), usage.get("output_tokens")
        if isinstance(prompt, int) and not isinstance(prompt, bool):
            self.input_tokens = prompt
        if isinstance(output, int) and not isinstance(output, bool):
            self.usage_tokens = output
        cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
        if isinstance(cached, int) and not isinstance(cached, bool):
            self.cached_tokens = cached
        reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
        if isinstance(reasoning, int) and not isinstance(reasoning, bool) and reasoning > 0:
            self.reasoning_tokens = reasoning
