"""Request bodies of the two chat APIs beside OpenAI's chat completions, from the same prompt or chat messages (and
their images): Anthropic's Messages (POST /v1/messages) and OpenAI's Responses (POST /v1/responses).

Messages: the system messages become `system`, each other message's content a string or content blocks — text,
`image` with a base64 (or url) source, an assistant's tool calls `tool_use` blocks, a tool result a user's
`tool_result` block. Responses: `input` is the prompt's text, or the messages as input items — text and
`input_image` parts, `function_call` and `function_call_output` items for an agent's tool calls — with
`store: false` (a load test has no use for the server keeping every response) unless a later turn will name this one
(`previous_response_id`)."""
from __future__ import annotations

import orjson

MESSAGES, RESPONSES = "anthropic-messages", "openai-responses"
ANTHROPIC_VERSION = "2023-06-01"  # the `anthropic-version` header every Messages request carries


def _messages(prompt: str | list) -> list[dict]:
    return prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def _anthropic_block(part: dict) -> dict:
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


def messages_body(model: str, prompt: str | list, max_tokens: int, stream: bool = True,
                  extra: dict | None = None) -> bytes:
    """An Anthropic Messages request (`extra`: the endpoint's extra_body, its keys winning)."""
    system, out = [], []
    for m in _messages(prompt):
        role, content = m["role"], m.get("content") or ""
        if role == "system":
            system.append(_text_of(content))
        elif role == "tool":
            out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": m.get("tool_call_id", ""),
                                                     "content": _text_of(content)}]})
        elif role == "assistant" and m.get("tool_calls"):
            blocks = [{"type": "text", "text": _text_of(content)}] if _text_of(content) else []
            for call in m["tool_calls"]:
                blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                               "input": _arguments(call["function"]["arguments"])})
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": role, "content": content if isinstance(content, str) else
                        [_anthropic_block(p) for p in content]})
    body: dict = {"model": model, "max_tokens": max_tokens, "messages": out, "stream": stream}
    if system:
        body["system"] = "\n".join(system)
    return orjson.dumps(body | extra if extra else body)


def _arguments(text: str) -> dict:
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {"arguments": text}  # a tool call's streamed arguments that are not JSON: kept as they came
    return value if isinstance(value, dict) else {"value": value}


def _response_part(part: dict) -> dict:
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": part["text"]}
    if kind == "image_url":
        return {"type": "input_image", "image_url": part["image_url"]["url"]}
    raise ValueError(f"a {kind} part has no Responses form (text and images only)")


def responses_input(prompt: str | list) -> str | list:
    """The Responses `input` of a prompt or chat messages."""
    if isinstance(prompt, str):
        return prompt
    items: list[dict] = []
    for m in prompt:
        role, content = m["role"], m.get("content") or ""
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id", ""),
                          "output": _text_of(content)})
            continue
        if role == "assistant" and m.get("tool_calls"):
            if _text_of(content):
                items.append({"role": "assistant", "content": _text_of(content)})
            items += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
            continue
        items.append({"role": role, "content": content if isinstance(content, str) else
                      [_response_part(p) for p in content]})
    return items


def responses_body(model: str, prompt: str | list, max_tokens: int, stream: bool = True, ignore_eos: bool = False,
                   min_tokens: int | None = None, previous_response_id: str = "", store: bool = False,
                   extra: dict | None = None) -> bytes:
    """An OpenAI Responses request (`ignore_eos` and `min_tokens`: vLLM's, sent only when asked for)."""
    body: dict = {"model": model, "input": responses_input(prompt), "max_output_tokens": max_tokens,
                  "stream": stream, "store": store}
    if previous_response_id:
        body["previous_response_id"] = previous_response_id
    if ignore_eos:
        body["ignore_eos"] = True
    if min_tokens is not None:
        body["min_tokens"] = min(min_tokens, max_tokens)
    return orjson.dumps(body | extra if extra else body)


def whole_messages(doc: dict) -> tuple[str, dict, str]:
    """(text, usage as OpenAI names it, stop reason) of a Messages response (stream = false)."""
    text = "".join(b.get("text", "") for b in doc["content"] if isinstance(b, dict) and b.get("type") == "text")
    usage = doc.get("usage") or {}
    return text, {"prompt_tokens": usage.get("input_tokens", -1), "completion_tokens": usage.get("output_tokens", -1)}, \
        str(doc.get("stop_reason") or "")


def whole_responses(doc: dict) -> tuple[str, dict, str]:
    """(text, usage as OpenAI's chat names it, status) of a Responses response (stream = false)."""
    text = "".join(part.get("text", "") for item in doc["output"] if isinstance(item, dict)
                   for part in item.get("content") or [] if isinstance(part, dict) and part.get("type") == "output_text")
    usage = doc.get("usage") or {}
    return text, {"prompt_tokens": usage.get("input_tokens", -1), "completion_tokens": usage.get("output_tokens", -1),
                  "prompt_tokens_details": usage.get("input_tokens_details") or {}}, str(doc.get("status") or "")


def body_extra(protocol: str, prompts) -> dict | None:
    """What every JSON body of an endpoint adds (its `prompts`: contract/profile/ Prompts): the structured-output
    request its JSON Schema makes — `response_format` for chat and completions, `text.format` for Responses — then
    its `extra_body` (whose keys win). None: nothing."""
    structured = getattr(prompts, "structured", None)
    extra = dict(prompts.extra_body or {}) if prompts is not None and prompts.extra_body else None
    if structured is None:
        return extra
    schema = {"type": "json_schema", "name": structured.name, "schema": structured.schema_, "strict": structured.strict}
    fields: dict = {"text": {"format": schema}} if protocol == RESPONSES else {
        "response_format": {"type": "json_schema", "json_schema": {k: v for k, v in schema.items() if k != "type"}}}
    return fields | extra if extra else fields
