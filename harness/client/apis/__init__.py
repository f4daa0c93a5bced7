"""The client's side of each generative HTTP serving API, one module each (its body, its stream's reader, its whole
reply's reader, its head lines and warm-up route), registered here by the name contract/apis/registry.py gives its
traits. Adding an API: docs/ARCHITECTURE.md, "Adding a serving API"."""
from __future__ import annotations

from tailrace.harness.client.apis import (
    anthropic_messages,
    openai_chat,
    openai_completions,
    openai_responses,
    triton_generate,
)
from tailrace.harness.client.apis.base import BodyAsk, GenerativeApi, body_extra

CLIENTS: dict[str, GenerativeApi] = {m.API.name: m.API for m in (
    openai_chat, openai_completions, anthropic_messages, openai_responses, triton_generate)}


def generative_client(protocol: str) -> GenerativeApi:
    """The client of a streamed HTTP API (KeyError: not one)."""
    return CLIENTS[protocol]


__all__ = ["CLIENTS", "BodyAsk", "GenerativeApi", "body_extra", "generative_client"]
