"""What OpenAI's chat completions and completions share (vLLM, SGLang, TGI, llama.cpp and most servers speak
both): usage asked for on every event (vLLM's continuous_usage_stats) and in a trailer, so that token counts come
from the server; `ignore_eos` and `min_tokens` to hold the output length; the same stream reader and whole reply."""
from __future__ import annotations

from typing import Any

from tailrace.harness.client.apis.base import BodyAsk, WholeReply
from tailrace.harness.client.streams.openai_stream import OpenAIStream


def openai_body(ask: BodyAsk, prompt_fields: dict[str, Any]) -> dict[str, Any]:
    """A chat or completions body: the model, the prompt's fields, the length asked for and how it is held."""
    body: dict[str, Any] = {"model": ask.model, "max_tokens": ask.max_tokens, "stream": ask.stream, **prompt_fields}
    if ask.stream:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if ask.ignore_eos:
        body["ignore_eos"] = True  # vLLM, SGLang, TGI's OpenAI route: the output length is the one asked for
    if ask.min_tokens is not None:
        body["min_tokens"] = min(ask.min_tokens, ask.max_tokens)
    return body


def openai_reader(chat: bool):
    """A new stream state for chat's (`delta.content`) or completions' (`text`) events."""
    return lambda _count_output: OpenAIStream(chat)


def openai_whole(doc: dict, chat: bool) -> WholeReply:
    choice = doc["choices"][0]
    text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
    return WholeReply(str(text or ""), doc.get("usage") or {}, str(choice.get("finish_reason") or ""))
