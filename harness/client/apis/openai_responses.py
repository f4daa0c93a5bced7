"""OpenAI Responses (POST /v1/responses): `input` is the prompt's text, or the messages as input items — text and
`input_image` parts, `function_call` and `function_call_output` items for an agent's tool calls — with `store:
false` (a load test has no use for the server keeping every response) unless a later turn will name this one
(`previous_response_id`)."""
from __future__ import annotations

from tailrace.harness.client.apis.base import BodyAsk, GenerativeApi, WholeReply, read_whole, text_of
from tailrace.harness.client.streams.responses_stream import ResponsesStream


def _part(part: dict) -> dict:
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
                          "output": text_of(content)})
            continue
        if role == "assistant" and m.get("tool_calls"):
            if text_of(content):
                items.append({"role": "assistant", "content": text_of(content)})
            items += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
            continue
        items.append({"role": role, "content": content if isinstance(content, str) else
                      [_part(p) for p in content]})
    return items


def responses_body(ask: BodyAsk, previous_response_id: str = "", store: bool = False) -> dict:
    """A Responses request (`ignore_eos` and `min_tokens`: vLLM's, sent only when asked for); a session's later
    turn names the reply before it (`previous_response_id`), and a turn a later one will name is stored."""
    request: dict = {"model": ask.model, "input": responses_input(ask.prompt), "max_output_tokens": ask.max_tokens,
                     "stream": ask.stream, "store": store}
    if previous_response_id:
        request["previous_response_id"] = previous_response_id
    if ask.ignore_eos:
        request["ignore_eos"] = True
    if ask.min_tokens is not None:
        request["min_tokens"] = min(ask.min_tokens, ask.max_tokens)
    return request


def whole(doc: dict) -> WholeReply:
    """A Responses reply (stream = false): its output text, its usage in OpenAI chat's names, its status."""
    text = "".join(part.get("text", "") for item in doc["output"] if isinstance(item, dict)
                   for part in item.get("content") or [] if isinstance(part, dict) and part.get("type") == "output_text")
    usage = doc.get("usage") or {}
    return WholeReply(text, {"prompt_tokens": usage.get("input_tokens", -1),
                             "completion_tokens": usage.get("output_tokens", -1),
                             "prompt_tokens_details": usage.get("input_tokens_details") or {}},
                      str(doc.get("status") or ""))


API = GenerativeApi("openai-responses", responses_body, lambda _count: ResponsesStream(True),
                    lambda payload, _count, result: read_whole(payload, result, whole))
