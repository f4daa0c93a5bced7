"""OpenAI chat completions (POST /v1/chat/completions): the prompt as messages — text, images and audio as content
parts, an agent's tool calls and results as they come."""
from __future__ import annotations

from tailrace.harness.client.apis.base import BodyAsk, GenerativeApi, messages_of, read_whole
from tailrace.harness.client.apis.openai_compatible import openai_body, openai_reader, openai_whole


def body(ask: BodyAsk) -> dict:
    return openai_body(ask, {"messages": messages_of(ask.prompt)})


API = GenerativeApi("openai-chat", body, openai_reader(chat=True),
                    lambda payload, _count, result: read_whole(payload, result, lambda doc: openai_whole(doc, True)))
