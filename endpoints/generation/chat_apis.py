"""Anthropic's Messages (/v1/messages) and OpenAI's Responses (/v1/responses) on the embedded server, as vLLM serves
them: each request read into the CompletionRequest the engines take (its messages' text, its images' tokens), and
each response written in its API's shapes — a stream of typed events (Messages: message_start,
content_block_start / _delta / _stop, message_delta with the usage and stop reason, message_stop; Responses:
response.created, the output item and its content part added, response.output_text.delta events, their done events,
response.completed with the usage and status), or one whole JSON response. Errors are each API's own shape."""
from __future__ import annotations

import time

import orjson

from tailrace.endpoints.generation.media import media_tokens
from tailrace.endpoints.generation.requests import CompletionRequest, flag, json_object, whole_number
from tailrace.endpoints.serving.errors import InferenceError

MESSAGES_PATH, RESPONSES_PATH = "/v1/messages", "/v1/responses"
STOP_REASONS = {"length": "max_tokens", "stop": "end_turn"}  # the engine's finish reasons, as Messages names them


def _text_and_media(content, where: str) -> tuple[str, int]:
    """A message's text and its images' tokens: a string, or content blocks / input parts of either API."""
    if isinstance(content, str):
        return content, 0
    if not isinstance(content, list):
        raise InferenceError(f"{where}: must be a string or a list of content blocks")
    texts, media = [], 0
    for k, block in enumerate(content):
        if not isinstance(block, dict):
            raise InferenceError(f"{where}[{k}]: must be an object with a type")
        kind = block.get("type")
        if kind in ("text", "input_text", "output_text"):
            texts.append(str(block.get("text", "")))
        elif kind == "image":  # Messages: {"source": {"type": "base64", "media_type", "data"}}
            source = block.get("source") if isinstance(block.get("source"), dict) else {}
            if source.get("type") != "base64" or not isinstance(source.get("data"), str):
                raise InferenceError(f"{where}[{k}].source: a base64 source (the embedded server fetches no URLs)")
            media += media_tokens({"type": "image_url", "image_url": {
                "url": f"data:{source.get('media_type', 'image/png')};base64,{source['data']}"}}, f"{where}[{k}]")
        elif kind == "input_image":  # Responses: {"image_url": "data:…"}
            media += media_tokens({"type": "image_url", "image_url": {"url": block.get("image_url")}}, f"{where}[{k}]")
        elif kind in ("tool_result", "tool_use"):
            texts.append(str(block.get("content") or block.get("input") or ""))
        else:
            raise InferenceError(f"{where}[{k}].type: {kind!r} is not served")
    return " ".join(texts), media


def _request(body: dict, messages: list, max_name: str, stream_default: bool = False) -> CompletionRequest:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InferenceError("model: required (a model /v1/models lists)")
    parts, media = [], 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InferenceError(f"messages[{i}]: must be an object")
        content = message.get("content", message.get("output", ""))
        text, tokens = _text_and_media(content, f"messages[{i}].content")
        parts.append(text)
        media += tokens
    text = "\n".join(parts)
    if not text.split() and not media:
        raise InferenceError("messages: are empty (no tokens)")
    stream = flag(body, "stream", stream_default)
    return CompletionRequest(model=model, text=text, max_tokens=whole_number(body, max_name, 16, 1), stream=stream,
                             include_usage=True, continuous_usage=False, ignore_eos=flag(body, "ignore_eos"),
                             min_tokens=whole_number(body, "min_tokens", 0, 0), media_tokens=media)


def parse_messages(payload: bytes) -> CompletionRequest:
    """An Anthropic Messages request; InferenceError naming the field otherwise."""
    body = json_object(payload, "the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InferenceError("messages: required, a non-empty list of {role, content}")
    if "max_tokens" not in body:
        raise InferenceError("max_tokens: required")
    system = body.get("system")
    if system is not None:
        messages = [{"content": system}, *messages]
    return _request(body, messages, "max_tokens")


def parse_responses(payload: bytes) -> CompletionRequest:
    """An OpenAI Responses request (`input`: a text or input items); InferenceError naming the field otherwise."""
    body = json_object(payload, "the body must be a JSON object")
    value = body.get("input")
    if isinstance(value, str):
        items = [{"content": value}]
    elif isinstance(value, list) and value:
        items = value
    else:
        raise InferenceError("input: required, a text or a non-empty list of input items")
    if body.get("previous_response_id"):
        raise InferenceError("previous_response_id: the embedded server keeps no responses (store is off)")
    return _request(body, items, "max_output_tokens")


class MessagesWriter:
    """One Messages response's events (each `event:` + `data:`), or its whole JSON."""

    def __init__(self, model: str, request_id: int) -> None:
        self.model, self.id = model, f"msg_{request_id:x}"

    @staticmethod
    def _event(kind: str, doc: dict) -> bytes:
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **doc}) + b"\n\n"

    def opening(self, prompt_tokens: int, cached: int) -> list[bytes]:
        message = {"id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model,
                   "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": prompt_tokens, "output_tokens": 0, "cache_read_input_tokens": cached}}
        return [self._event("message_start", {"message": message}),
                self._event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})]

    def text(self, text: str, finish_reason: str | None = None, running: dict | None = None) -> bytes:
        return self._event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}})

    def closing(self, finish_reason: str, prompt_tokens: int, output_tokens: int, cached: int, timing: dict
                ) -> list[bytes]:
        return [self._event("content_block_stop", {"index": 0}),
                self._event("message_delta", {"delta": {"stop_reason": STOP_REASONS.get(finish_reason, "end_turn"),
                                                        "stop_sequence": None},
                                              "usage": {"output_tokens": output_tokens}, "server_timing": timing}),
                self._event("message_stop", {})]

    def whole(self, text: str, finish_reason: str, prompt_tokens: int, output_tokens: int, cached: int,
              timing: dict) -> bytes:
        return orjson.dumps({"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                             "content": [{"type": "text", "text": text}],
                             "stop_reason": STOP_REASONS.get(finish_reason, "end_turn"), "stop_sequence": None,
                             "usage": {"input_tokens": prompt_tokens, "output_tokens": output_tokens,
                                       "cache_read_input_tokens": cached}, "server_timing": timing})


class ResponsesWriter:
    """One Responses response's events, or its whole JSON (vLLM's: the last event is response.completed, its status
    `incomplete` when the output hit max_output_tokens)."""

    def __init__(self, model: str, request_id: int) -> None:
        self.model, self.id, self.item = model, f"resp_{request_id:x}", f"msg_{request_id:x}"
        self.created, self.sequence, self.texts = int(time.time()), 0, []

    def _event(self, kind: str, doc: dict) -> bytes:
        event = b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(
            {"type": kind, "sequence_number": self.sequence, **doc}) + b"\n\n"
        self.sequence += 1
        return event

    def _response(self, status: str, output: list, usage: dict | None = None, finish_reason: str = "") -> dict:
        doc = {"id": self.id, "object": "response", "created_at": self.created, "model": self.model,
               "status": status, "output": output, "usage": usage}
        if status == "incomplete":
            doc["incomplete_details"] = {"reason": "max_output_tokens"}
        return doc

    def _message(self, text: str, status: str) -> dict:
        return {"type": "message", "id": self.item, "role": "assistant", "status": status,
                "content": [{"type": "output_text", "text": text, "annotations": []}]}

    @staticmethod
    def _usage(prompt_tokens: int, output_tokens: int, cached: int) -> dict:
        return {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt_tokens + output_tokens}

    def opening(self, prompt_tokens: int, cached: int) -> list[bytes]:
        part = {"item_id": self.item, "output_index": 0, "content_index": 0}
        return [self._event("response.created", {"response": self._response("in_progress", [])}),
                self._event("response.output_item.added", {"output_index": 0, "item": {
                    "type": "message", "id": self.item, "role": "assistant", "status": "in_progress", "content": []}}),
                self._event("response.content_part.added", {**part, "part": {"type": "output_text", "text": ""}})]

    def text(self, text: str, finish_reason: str | None = None, running: dict | None = None) -> bytes:
        self.texts.append(text)
        return self._event("response.output_text.delta", {"item_id": self.item, "output_index": 0,
                                                          "content_index": 0, "delta": text})

    def closing(self, finish_reason: str, prompt_tokens: int, output_tokens: int, cached: int, timing: dict
                ) -> list[bytes]:
        text, part = "".join(self.texts), {"item_id": self.item, "output_index": 0, "content_index": 0}
        status = "incomplete" if finish_reason == "length" else "completed"
        response = self._response(status, [self._message(text, "completed")],
                                  self._usage(prompt_tokens, output_tokens, cached))
        return [self._event("response.output_text.done", {**part, "text": text}),
                self._event("response.content_part.done", {**part, "part": {"type": "output_text", "text": text}}),
                self._event("response.output_item.done", {"output_index": 0,
                                                          "item": self._message(text, "completed")}),
                self._event("response.completed", {"response": response, "server_timing": timing})]

    def whole(self, text: str, finish_reason: str, prompt_tokens: int, output_tokens: int, cached: int,
              timing: dict) -> bytes:
        status = "incomplete" if finish_reason == "length" else "completed"
        return orjson.dumps({**self._response(status, [self._message(text, "completed")],
                                              self._usage(prompt_tokens, output_tokens, cached)),
                             "server_timing": timing})


def api_error(path: str, message: str, status: int) -> bytes:
    """An error in the API's own shape (Messages: {"type": "error", "error": {type, message}})."""
    if path == MESSAGES_PATH:
        kind = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error"}.get(status, "api_error")
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error" if status == 400 else
                                   "server_error", "param": None, "code": status}})

