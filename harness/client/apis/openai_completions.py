"""OpenAI completions (POST /v1/completions): the prompt as one text — chat messages' contents one after another."""
from __future__ import annotations

from tailrace.harness.client.apis.base import BodyAsk, GenerativeApi, read_whole
from tailrace.harness.client.apis.openai_compatible import openai_body, openai_reader, openai_whole


def prompt_text(prompt: str | list) -> str:
    """A prompt as one text: chat messages' contents joined by newlines."""
    return "\n".join(m["content"] for m in prompt) if isinstance(prompt, list) else prompt


def body(ask: BodyAsk) -> dict:
    return openai_body(ask, {"prompt": prompt_text(ask.prompt)})


API = GenerativeApi("openai-completions", body, openai_reader(chat=False),
                    lambda payload, _count, result: read_whole(payload, result, lambda doc: openai_whole(doc, False)))
