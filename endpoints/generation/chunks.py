"""The JSON an OpenAI-compatible server streams and answers, in vLLM's shapes: completion and chat chunks (the chat
stream opens with a role-only chunk), the usage trailer (empty choices), whole responses for stream = false, and
errors ({"error": {message, type, code}})."""
from __future__ import annotations

import time

import orjson

_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 429: "TooManyRequestsError",
                503: "ServiceUnavailableError"}


class ChunkWriter:
    """The events of one streamed response."""

    def __init__(self, chat: bool, model: str, request_id: int, include_usage: bool = True) -> None:
        self.chat, self.include_usage = chat, include_usage
        self.model = model
        self.id = ("chatcmpl-" if chat else "cmpl-") + f"{request_id:x}"
        self.created = int(time.time())
        self.object = "chat.completion.chunk" if chat else "text_completion"

    def _event(self, choices: list, usage: dict | None = None, extra: dict | None = None) -> bytes:
        doc = {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
               "choices": choices}
        if usage is not None:
            doc["usage"] = usage
        if extra:
            doc.update(extra)
        return b"data: " + orjson.dumps(doc) + b"\n\n"

    def role(self) -> bytes:
        """The chat stream's first event: the role, no content."""
        return self._event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                             "finish_reason": None}])

    def text(self, text: str, finish_reason: str | None, usage: dict | None) -> bytes:
        """An event carrying `text` (one token, or several when the stream fell behind the engine)."""
        if self.chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
                      "stop_reason": None}
        return self._event([choice], usage)

    def trailer(self, usage: dict, timing: dict) -> bytes:
        """The usage trailer: no choices (not a token); the server's queue, prefill and decode times beside it."""
        return self._event([], usage, {"server_timing": timing})

    def opening(self, prompt_tokens: int, cached: int) -> list[bytes]:
        """What the stream sends before its first token: a chat stream's role-only event."""
        return [self.role()] if self.chat else []

    def closing(self, finish_reason: str, prompt_tokens: int, output_tokens: int, cached: int, timing: dict
                ) -> list[bytes]:
        """What ends the stream: the usage trailer (when asked for), then [DONE]."""
        trailer = [self.trailer(usage(prompt_tokens, output_tokens, cached), timing)] if self.include_usage else []
        return [*trailer, DONE]

    def whole(self, text: str, finish_reason: str, prompt_tokens: int, output_tokens: int, cached: int,
              timing: dict) -> bytes:
        """The response of a request with stream = false."""
        usage_doc = usage(prompt_tokens, output_tokens, cached)
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return orjson.dumps({"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                             "created": self.created, "model": self.model, "choices": [choice], "usage": usage_doc,
                             "server_timing": timing})


DONE = b"data: [DONE]\n\n"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    """OpenAI's usage, with vLLM's prompt_tokens_details.cached_tokens (the prompt's tokens the prefix cache had)."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def error_body(message: str, status: int) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": _ERROR_TYPES.get(status, "ServerError"),
                                   "param": None, "code": status}})


def models_body(names: list[str], max_model_len: dict[str, int]) -> bytes:
    """GET /v1/models."""
    created = int(time.time())
    return orjson.dumps({"object": "list", "data": [
        {"id": n, "object": "model", "created": created, "owned_by": "tailrace", "root": n, "parent": None,
         "max_model_len": max_model_len[n]} for n in names]})
