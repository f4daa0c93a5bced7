"""Anthropic Messages (POST /v1/messages, `anthropic-version: 2023-06-01`): the system messages become `system`,
each other message's content a string or content blocks — text, `image` with a base64 (or url) source, an
assistant's tool calls `tool_use` blocks, a tool result a user's `tool_result` block. The API has no `ignore_eos` or
`min_tokens`: the model's own lengths."""
from __future__ import annotations

from typing import Any

import orjson

from tailrace.harness.client.apis.base import BodyAsk, GenerativeApi, WholeReply, messages_of, read_whole, text_of
from tailrace.harness.client.streams.anthropic_stream import AnthropicStream

ANTHROPIC_VERSION = "2023-06-01"  # the `anthropic-version` header every Messages request carries


def _block(part: dict) -> dict:
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part["text"]}
    if kind == "image_url":
        url = part["image_url"]["url"]
        if url.startswith("data:"):
            head, _, data = url.partition(",")
            return {"type": "image", "source": {"type": "base64", "media_type": head[5:].split(";")[0], "data": data}}
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise ValueError(f"a {kind} part has no Messages form (text and images only)")


def tool_arguments(text: str) -> dict:
    """A tool call's arguments as an object (streamed arguments that are not JSON: kept as they came)."""
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"value": value}


def body(ask: BodyAsk) -> dict:
    system, out = [], []
    for m in messages_of(ask.prompt):
        role, content = m["role"], m.get("content") or ""
        if role == "system":
            system.append(text_of(content))
        elif role == "tool":
            out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": m.get("tool_call_id", ""),
                                                     "content": text_of(content)}]})
        elif role == "assistant" and m.get("tool_calls"):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text_of(content)}] if text_of(content) else []
            for call in m["tool_calls"]:
                blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                               "input": tool_arguments(call["function"]["arguments"])})
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": role, "content": content if isinstance(content, str) else
                        [_block(p) for p in content]})
    request: dict = {"model": ask.model, "max_tokens": ask.max_tokens, "messages": out, "stream": ask.stream}
    if system:
        request["system"] = "\n".join(system)
    return request


def whole(doc: dict) -> WholeReply:
    """A Messages reply (stream = false): its text blocks, its usage in OpenAI's names, its stop reason."""
    text = "".join(b.get("text", "") for b in doc["content"] if isinstance(b, dict) and b.get("type") == "text")
    usage = doc.get("usage") or {}
    return WholeReply(text, {"prompt_tokens": usage.get("input_tokens", -1),
                             "completion_tokens": usage.get("output_tokens", -1)}, str(doc.get("stop_reason") or ""))


API = GenerativeApi("anthropic-messages", body, lambda _count: AnthropicStream(True),
                    lambda payload, _count, result: read_whole(payload, result, whole),
                    head_lines=(f"anthropic-version: {ANTHROPIC_VERSION}",))
