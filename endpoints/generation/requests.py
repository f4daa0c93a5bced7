"""An OpenAI-compatible request body (/v1/completions, /v1/chat/completions) read and checked: what the engine is
asked to generate. A bad body is an InferenceError (400) naming the field, as vLLM answers."""
from __future__ import annotations

from dataclasses import dataclass

import orjson

from tailrace.endpoints.generation.media import media_tokens
from tailrace.endpoints.serving.errors import InferenceError


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    text: str  # the prompt, or the chat messages' contents one after another
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    ignore_eos: bool
    min_tokens: int
    media_tokens: int = 0  # the images' and audio's tokens (endpoints/generation/media.py)


def json_object(payload: bytes, what: str) -> dict:
    """The body as a JSON object; InferenceError (400) saying `what` it must be otherwise."""
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise InferenceError(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InferenceError(what)
    return body


def whole_number(body: dict, name: str, default: int | None, low: int, label: str = "") -> int:
    """body[name], a whole number ≥ low (`label`: how the message names it)."""
    value = body.get(name, default)
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InferenceError(f"{label or name}: must be a whole number ≥ {low}, got {value!r}")
    return value


def flag(doc: dict, name: str, default: bool = False, label: str = "") -> bool:
    """doc[name], true or false."""
    value = doc.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InferenceError(f"{label or name}: must be true or false, got {value!r}")
    return value


def parse_completion(payload: bytes, chat: bool, default_max_tokens: int = 16) -> CompletionRequest:
    """The request `payload` asks for; InferenceError naming the field when it is not one."""
    body = json_object(payload, "the body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InferenceError("model: required (a model /v1/models lists)")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InferenceError("messages: required, a non-empty list of {role, content}")
        parts, media = [], 0
        for i, message in enumerate(messages):
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):  # content parts: the text ones, and the media's tokens
                if not all(isinstance(p, dict) for p in content):
                    raise InferenceError(f"messages[{i}].content: each part must be an object with a type")
                media += sum(media_tokens(p, f"messages[{i}].content[{k}]") for k, p in enumerate(content)
                             if p.get("type") != "text")
                content = " ".join(p.get("text", "") for p in content if p.get("type") == "text")
            if not isinstance(content, str):
                raise InferenceError(f"messages[{i}].content: must be text")
            parts.append(content)
        text = "\n".join(parts)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise InferenceError("prompt: required, one string")
        text = prompt
    if not text.split() and not (chat and media):
        raise InferenceError(("messages" if chat else "prompt") + ": is empty (no tokens)")
    max_name = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    max_tokens = whole_number(body, max_name, default_max_tokens, 1)
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise InferenceError("stream_options: must be an object")
    stream = flag(body, "stream")
    if options and not stream:
        raise InferenceError("stream_options: only with stream = true")
    n = body.get("n", 1)
    if n not in (1, None):
        raise InferenceError(f"n: only 1 is served, got {n!r}")
    return CompletionRequest(model=model, text=text, max_tokens=max_tokens, stream=stream,
                             include_usage=flag(options, "include_usage"),
                             continuous_usage=flag(options, "continuous_usage_stats"),
                             ignore_eos=flag(body, "ignore_eos"), min_tokens=whole_number(body, "min_tokens", 0, 0),
                             media_tokens=media if chat else 0)
