"""What an OpenAI-compatible stream (/v1/completions, /v1/chat/completions with `stream: true`) says, event by
event: which events carry tokens and how many, the finish reason, the usage, in-band errors, the end.

Rules (docs/METHODS.md, "Streams"):
- a token event is one whose choice carries text: `choices[0].text` (completions) or `choices[0].delta.content`
  (chat; the chat stream's first event carries only the role and is not a token); a reasoning model's
  `delta.reasoning_content` (vLLM; newer releases `delta.reasoning`) and an agent's `delta.tool_calls` are output
  too: reasoning tokens are counted apart, and the first answer token (content or a tool call) has its own instant;
- how many tokens an event carries: the growth of `usage.completion_tokens` when the server reports usage on every
  event (vLLM's `continuous_usage_stats`), else 1; the output tokens of the request: the last usage the server
  reported, else the events counted (`count_source` says which: "usage", "final_usage", "events");
- the usage trailer (`choices: []`) is not a token event and never moves the last token's instant;
- `data: {"error": …}` inside a 200 stream is a failure with its message; `data: [DONE]` ends the stream; a stream
  that closes without [DONE] and without a finish reason was cut.
"""
from __future__ import annotations

from array import array

import orjson

DONE = b"[DONE]"
COMPLETE, ERROR_EVENT, CUT, TTFT_TIMEOUT, TIMEOUT, STALLED = ("complete", "error_event", "cut", "ttft_timeout",
                                                              "timeout", "stalled")


def cached_tokens(usage) -> int:
    """A usage's prompt_tokens_details.cached_tokens (vLLM's, OpenAI's): the prompt tokens its cache held; -1: none."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def record_token_event(stream, read_ns: int, text: str, tokens: int) -> None:
    """A token event into a stream's state (OpenAIStream's, TritonGenerateStream's): its instant and token count,
    the first and last token's instants, the text's first 80 characters, the tokens counted."""
    stream.text_bytes += len(text)
    stream.texts.append(text)
    if len(stream.preview) < 80:
        stream.preview = (stream.preview + text)[:80]
    if stream.first_token_ns < 0:
        stream.first_token_ns = read_ns
    stream.last_token_ns = read_ns
    stream.event_ns.append(read_ns)
    stream.event_tokens.append(min(tokens, 65535))
    stream._counted += tokens


class StreamProtocolError(ValueError):
    """An event that is not the JSON an OpenAI-compatible stream sends."""


def typed_event(data: bytes) -> tuple[dict, str]:
    """A typed event's JSON object and its `type` (Anthropic's and OpenAI Responses' events); StreamProtocolError
    when it is not JSON or has no type."""
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise StreamProtocolError(f"an event that is not JSON ({exc}): {data[:80]!r}") from None
    kind = event.get("type") if isinstance(event, dict) else None
    if not isinstance(kind, str):
        raise StreamProtocolError(f"an event without a type: {data[:80]!r}")
    return event, kind


class TokenStream:
    """The state every protocol's stream keeps, fed its events as they are read (instants: monotonic ns): the token
    events' instants and counts, the usage, reasoning and tool calls, how it ended. A protocol's stream is one of
    these with its own `feed` (OpenAIStream, AnthropicStream, ResponsesStream)."""

    __slots__ = ("chat", "first_token_ns", "last_token_ns", "event_ns", "event_tokens", "usage_tokens",
                 "input_tokens", "finish_reason", "error", "done", "_continuous", "_counted", "text_bytes", "preview",
                 "texts", "cached_tokens", "reasoning_tokens", "first_answer_ns", "reasoning_events", "tool_calls",
                 "unknown_events")

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.first_token_ns = -1
        self.last_token_ns = -1
        self.event_ns = array("q")  # each token event's read instant
        self.event_tokens = array("H")  # and how many tokens it carried
        self.usage_tokens = -1  # the last usage.completion_tokens the server reported
        self.input_tokens = -1
        self.finish_reason = ""
        self.error = ""
        self.done = False  # the protocol's end seen ([DONE], message_stop, response.completed)
        self._continuous = False  # usage on token events (continuous_usage_stats)
        self._counted = 0
        self.text_bytes = 0
        self.preview = ""  # the text's first 80 characters (tailrace probe prints them)
        self.texts: list[str] = []  # every token event's text (counted with the profile's tokenizer, if any)
        self.cached_tokens = -1  # usage.prompt_tokens_details.cached_tokens
        self.reasoning_tokens = -1  # tokens of reasoning deltas (-1: none seen)
        self.first_answer_ns = -1  # the first content or tool-call event's read instant
        self.reasoning_events: list[int] = []  # which token events were reasoning (their places in `texts`)
        self.tool_calls: dict[int, dict] = {}  # index → {"id", "name", "arguments"} as streamed
        self.unknown_events = 0  # events of a type the protocol's reader does not know: skipped, counted

    def token(self, read_ns: int, text: str, tokens: int, reasoning: bool) -> None:
        """A token event: recorded, its reasoning counted apart, the first answer's instant kept."""
        record_token_event(self, read_ns, text, tokens)
        if reasoning:
            self.reasoning_tokens = max(self.reasoning_tokens, 0) + tokens
            self.reasoning_events.append(len(self.texts) - 1)
        elif self.first_answer_ns < 0:
            self.first_answer_ns = read_ns

    @property
    def output_tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens >= 0 else self._counted

    @property
    def count_source(self) -> str:
        if self.usage_tokens < 0:
            return "events"
        return "usage" if self._continuous else "final_usage"

    def outcome(self) -> str:
        """How the stream ended, once it has: complete, error_event or cut (timeouts are the sender's to say)."""
        if self.error:
            return ERROR_EVENT
        return COMPLETE if self.done or self.finish_reason else CUT


class OpenAIStream(TokenStream):
    """The state of one OpenAI chat or completions stream."""

    __slots__ = ()

    def feed(self, read_ns: int, data: bytes) -> None:
        """One event's data, read at `read_ns`."""
        if data == DONE:
            self.done = True
            return
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise StreamProtocolError(f"an event that is not JSON ({exc}): {data[:80]!r}") from None
        if not isinstance(event, dict):
            raise StreamProtocolError(f"an event that is not a JSON object: {data[:80]!r}")
        if "error" in event:
            error = event["error"]
            message = error.get("message") if isinstance(error, dict) else error
            self.error = str(message or error)[:200]
            return
        usage = event.get("usage")
        choices = event.get("choices")
        if not isinstance(choices, list):
            raise StreamProtocolError(f"an event without choices: {data[:80]!r}")
        text, reasoning = "", False
        if choices:
            choice = choices[0]
            if not isinstance(choice, dict):
                raise StreamProtocolError(f"a choice that is not an object: {data[:80]!r}")
            if self.chat:
                delta = choice.get("delta") or {}
                if isinstance(delta, dict):
                    text = delta.get("content") or ""
                    calls = delta.get("tool_calls")
                    if not text and isinstance(calls, list) and calls:
                        text = self._tool_call_pieces(calls)
                    if not text:
                        text = delta.get("reasoning_content") or delta.get("reasoning") or ""
                        reasoning = bool(text)
                    if not isinstance(text, str):
                        raise StreamProtocolError(f"a delta whose text is not a string: {data[:80]!r}")
            else:
                text = choice.get("text") or ""
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])[:32]
        tokens = 1
        if isinstance(usage, dict):
            completion = usage.get("completion_tokens")
            prompt = usage.get("prompt_tokens")
            if isinstance(prompt, int):
                self.input_tokens = prompt
            if "prompt_tokens_details" in usage:
                self.cached_tokens = cached_tokens(usage)
            if isinstance(completion, int):
                if choices and text:
                    self._continuous = True
                    tokens = max(1, completion - max(self.usage_tokens, 0))
                self.usage_tokens = completion
        if text:
            self.token(read_ns, text, tokens, reasoning)

    def _tool_call_pieces(self, calls: list) -> str:
        """A delta's tool-call pieces into the calls so far (by index); the text they carry (name, arguments)."""
        pieces = []
        for call in calls:
            if not isinstance(call, dict):
                raise StreamProtocolError(f"a tool call that is not an object: {str(call)[:80]!r}")
            mine = self.tool_calls.setdefault(int(call.get("index", 0)), {"id": "", "name": "", "arguments": ""})
            function = call.get("function") or {}
            if call.get("id"):
                mine["id"] = str(call["id"])
            if isinstance(function, dict):
                mine["name"] += str(function.get("name") or "")
                mine["arguments"] += str(function.get("arguments") or "")
                pieces.append(str(function.get("name") or "") + str(function.get("arguments") or ""))
        return "".join(pieces)
