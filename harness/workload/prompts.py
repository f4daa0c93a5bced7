"""What a generative endpoint is sent: prompts drawn from the profile's lengths (seeded), or read from a JSONL or
ShareGPT-format file (in order, or drawn with or without replacement), each with its max_tokens, encoded as request
bodies before the run.

Synthetic prompts are words of a fixed vocabulary, one word for each input token asked (a tokenizer splits common
words into about one token each; the server's usage reports the real count, and the record keeps it) — or, where the
profile names the model's tokenizer (`prompts.tokenizer`), tokens of its vocabulary, exactly as many as asked. A prompt
file has one JSON object a line: {"prompt": "…"} or {"messages": [{"role": …, "content": …}, …]}, and optionally
"max_tokens"; a line that is not one is a PromptFileError naming the file and the line.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from tailrace.contract.profile import Endpoint, Prompts, TokenCount
from tailrace.harness.client.apis import body_extra
from tailrace.harness.client.generative import request_body
from tailrace.harness.client.tokenizer import PromptTokenizer, TokenCounter, TokenizerError, load_tokenizer

WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point "
         "government company number group problem fact able bad best better big black certain clear different early "
         "easy economic federal free full good great hard high human important international large late little local "
         "long low major military national new old only other political possible public real recent right small "
         "social special strong sure true white whole young ask become begin call come consider continue create "
         "feel find follow give grow happen hear help hold include keep know lead learn leave let like live look "
         "lose make mean meet move need offer open pay play provide put reach read remain report run say see seem "
         "send serve set show sit speak spend stand start stay take talk tell think try turn understand use wait "
         "walk want watch write river stone cloud garden window letter music paper market signal engine bridge").split()


class PromptFileError(ValueError):
    """A prompt file that cannot be read, or a line of it that is not a prompt."""


FILE_PART = "_tailrace_file"  # a prompt file's media reference (harness/workload/media.py resolves it)
MEDIA_KEYS = {"images": "image", "image": "image", "audio": "audio", "video": "video", "videos": "video"}


def media_refs(doc: dict, path: Path, n: int) -> list[dict]:
    """A prompt line's media (`"images"` / `"image"`, `"audio"`, `"video"`: a path or URL, or a list of them) as
    references the media step resolves; PromptFileError naming the line when one is not a text."""
    refs = []
    for key, kind in MEDIA_KEYS.items():
        value = doc.get(key)
        if value is None:
            continue
        for ref in value if isinstance(value, list) else [value]:
            if not isinstance(ref, str) or not ref:
                raise PromptFileError(f"{path}:{n}: {key}: each must be a path or URL (a non-empty string)")
            refs.append({"type": FILE_PART, "kind": kind, "ref": ref})
    return refs


def with_refs(prompt: str | list, refs: list[dict]) -> str | list:
    """`prompt` as chat messages whose last user message carries `refs` after its text (unchanged without refs)."""
    if not refs:
        return prompt
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=len(messages) - 1)
    messages[last]["content"] = [{"type": "text", "text": messages[last]["content"]}, *refs]
    return messages


def draw_counts(spec: TokenCount, n: int, rng: np.random.Generator) -> np.ndarray:
    """n token counts after `spec` (integers ≥ 1, within its min / max)."""
    if spec.distribution == "fixed":
        counts = np.full(n, float(spec.mean))
    elif spec.distribution == "uniform":
        counts = rng.integers(spec.min, spec.max + 1, n).astype(float)
    elif spec.distribution == "normal":
        counts = rng.normal(spec.mean, spec.stddev, n)
    else:  # lognormal with the given mean and standard deviation of the count itself
        sigma2 = np.log1p((spec.stddev / spec.mean) ** 2)
        counts = rng.lognormal(np.log(spec.mean) - sigma2 / 2, np.sqrt(sigma2), n)
    low, high = spec.min or 1, spec.max or np.inf
    return np.clip(np.rint(counts), low, high).astype(np.int64)


def synthetic_prompts(prompts: Prompts, seed: int, tokenizer: PromptTokenizer | None = None) -> list[tuple[str, int]]:
    """(prompt, max_tokens) × prompts.count, the same for a given seed on every worker. With `prefix_tokens`, prompt
    i begins with prefix i mod `prefix_count` (each `prefix_tokens` words, drawn once), then its own words. With a
    tokenizer, each prompt is exactly its drawn length in the tokenizer's tokens (prefix included)."""
    rng = np.random.default_rng(seed)
    inputs = draw_counts(prompts.input_tokens, prompts.count, rng)
    outputs = draw_counts(prompts.output_tokens, prompts.count, rng)
    return prompts_of_lengths(prompts, inputs, outputs, rng, tokenizer)


def prompts_of_lengths(prompts: Prompts, inputs: np.ndarray, outputs: np.ndarray, rng: np.random.Generator,
                       tokenizer: PromptTokenizer | None = None) -> list[tuple[str, int]]:
    """(prompt of inputs[i] tokens — words without a tokenizer —, max_tokens outputs[i]) for each i."""
    if tokenizer is not None:
        return _tokenized_prompts(prompts, inputs, outputs, tokenizer, rng)
    vocabulary = np.array(WORDS)
    # joined as a list: str.join over a numpy array of str loses a Ctrl-C that lands during it (15 of 20 in a tight
    # loop) — a run's start then went on as if none had come
    words = lambda k: " ".join(vocabulary[rng.integers(0, len(vocabulary), int(k))].tolist())  # noqa: E731
    prefixes = [words(prompts.prefix_tokens) + " " for _ in range(prompts.prefix_count)] if prompts.prefix_tokens \
        else [""]
    return [(prefixes[i % len(prefixes)] + words(k), int(m)) for i, (k, m) in enumerate(zip(inputs, outputs))]


def _tokenized_prompts(prompts: Prompts, inputs: np.ndarray, outputs: np.ndarray, tokenizer: PromptTokenizer,
                       rng: np.random.Generator) -> list[tuple[str, int]]:
    words = tokenizer.word_ids()
    prefixes = [rng.choice(words, prompts.prefix_tokens) for _ in range(prompts.prefix_count)] \
        if prompts.prefix_tokens else [np.empty(0, np.int64)]
    out = []
    for i, (k, m) in enumerate(zip(inputs, outputs)):
        prefix = prefixes[i % len(prefixes)]
        own = rng.choice(words, max(0, int(k) - len(prefix)))
        text, _ = tokenizer.text_of(np.concatenate([prefix, own]), max(int(k), len(prefix)), rng)
        out.append((text, int(m)))
    return out


def json_lines(path: Path, lines: list, error: type[ValueError], wanted: str = "") -> list[tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSONL file; `error` names the file and line of one that
    is not a JSON object (prompt files, trace files)."""
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise error(f"{path}:{n}: not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise error(f"{path}:{n}: a line must be a JSON object" + (f" {wanted}" if wanted else ""))
        out.append((n, doc))
    return out


def line_prompt(doc: dict) -> str | list | None:
    """A JSONL line's "prompt" (a non-empty string) or "messages" (a list of {"role", "content"} texts); None when it
    has neither."""
    prompt = doc.get("prompt", doc.get("messages"))
    if isinstance(prompt, str) and prompt:
        return prompt
    if isinstance(prompt, list) and prompt and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt):
        return prompt
    return None


def file_prompts(path: Path, default_max_tokens: int | None) -> list[tuple[str | list, int | None]]:
    """(prompt or messages, max_tokens — `default_max_tokens` where a line gives none[, the line's own request
    fields]) of every line of a JSONL prompt file."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise PromptFileError(f"{path}: {exc.strerror or exc}") from None
    out = []
    for n, doc in json_lines(path, lines, PromptFileError, 'with "prompt" or "messages"'):
        prompt = line_prompt(doc)
        if prompt is None:
            raise PromptFileError(f"{path}:{n}: needs \"prompt\" (a non-empty string) or \"messages\" (a list of "
                                  "{\"role\", \"content\"} objects)")
        max_tokens = doc.get("max_tokens", default_max_tokens)
        if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                       or max_tokens < 1):
            raise PromptFileError(f"{path}:{n}: max_tokens must be a whole number ≥ 1, got {max_tokens!r}")
        fields = doc.get("request")
        if fields is not None and not isinstance(fields, dict):
            raise PromptFileError(f"{path}:{n}: request must be a JSON object (fields merged into this line's "
                                  f"request body), got {type(fields).__name__}")
        item = (with_refs(prompt, media_refs(doc, path, n)), max_tokens)
        out.append((*item, fields) if fields else item)
    if not out:
        raise PromptFileError(f"{path}: no prompts")
    return out


_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
          "bard": "assistant", "bing": "assistant", "system": "system"}


def sharegpt_conversations(path: Path, error: type[ValueError] = PromptFileError) -> list[list[tuple[str, str]]]:
    """Every conversation of a ShareGPT-format file (a JSON list of {"conversations": [{"from": "human" | "gpt" |
    "system", "value": …}, …]}) as (role, text) turns, roles in OpenAI's names; `error` names the file and item."""
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise error(f"{path}: {exc.strerror or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise error(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, list):
        raise error(f"{path}: a ShareGPT file is a JSON list of {{\"conversations\": [...]}} items")
    out = []
    for n, item in enumerate(doc):
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list) or not all(isinstance(t, dict) and isinstance(t.get("value"), str)
                                                  and t.get("from") in _ROLES for t in turns):
            raise error(f"{path}: item {n}: needs \"conversations\", a list of {{\"from\": human | gpt | "
                        "system, \"value\": text}} turns")
        out.append([(_ROLES[t["from"]], t["value"]) for t in turns])
    return out


def sharegpt_prompts(path: Path, conversation: str = "first_turn") -> list[tuple[str | list, int | None]]:
    """(prompt or chat messages, the reply's length in words or None) of every conversation of a ShareGPT-format
    file that has a human turn: its first human turn, or (`conversation` = "messages") every turn up to its last
    human one."""
    out = []
    for turns in sharegpt_conversations(path):
        humans = [i for i, (role, text) in enumerate(turns) if role == "user" and text.strip()]
        if not humans:
            continue  # nothing to ask
        last = humans[0] if conversation == "first_turn" else humans[-1]
        reply = next((text for role, text in turns[last + 1:] if role == "assistant"), None)
        prompt = turns[last][1] if conversation == "first_turn" else [
            {"role": role, "content": text} for role, text in turns[:last + 1]]
        out.append((prompt, max(1, len(reply.split())) if reply else None))
    if not out:
        raise PromptFileError(f"{path}: no conversation with a human turn")
    return out


def file_items(spec: Prompts, seed: int, path: Path) -> list[tuple[str | list, int]]:
    """A prompt file's (prompt, max_tokens), read in its format, max_tokens from the file where it gives one (unless
    `output_from` is "profile"), else drawn from output_tokens; in order, or `count` of them drawn."""
    fmt = spec.format if spec.format != "auto" else ("sharegpt" if path.suffix.lower() == ".json" else "jsonl")
    items = sharegpt_prompts(path, spec.conversation) if fmt == "sharegpt" else file_prompts(path, None)
    rng = np.random.default_rng(seed)
    drawn = draw_counts(spec.output_tokens, len(items), rng)
    items = [(prompt, int(given) if given is not None and spec.output_from == "file" else int(k), *fields)
             for (prompt, given, *fields), k in zip(items, drawn)]
    if spec.sample == "with_replacement":
        return [items[i] for i in rng.integers(0, len(items), spec.count)]
    if spec.sample == "without_replacement":
        if spec.count > len(items):
            raise PromptFileError(f"{path}: prompts.count {spec.count} without replacement, but the file has "
                                  f"{len(items)} prompts")
        return [items[i] for i in rng.permutation(len(items))[:spec.count]]
    return items


def data_path(name: str, data_root: Path) -> Path:
    """A data file named in a profile: as it is when absolute, else under `data_root` (where the worker runs)."""
    return Path(name) if Path(name).is_absolute() else data_root / name


def prompt_tokenizer(endpoint: Endpoint, data_root: Path) -> PromptTokenizer | None:
    """The tokenizer the endpoint's prompts name (relative to the data root), or None."""
    spec = endpoint.prompts or Prompts()
    if spec.tokenizer is None:
        return None
    try:
        return load_tokenizer(str(data_path(spec.tokenizer, data_root)))
    except TokenizerError as exc:
        raise PromptFileError(f"prompts.tokenizer: {exc}") from None


def prompt_items(endpoint: Endpoint, seed: int, data_root: Path) -> list[tuple[str | list, int]]:
    """(prompt or chat messages, max_tokens) of a generative endpoint: its file's, or drawn."""
    spec = endpoint.prompts or Prompts()
    if spec.file is not None:
        return file_items(spec, seed, data_path(spec.file, data_root))
    return synthetic_prompts(spec, seed, prompt_tokenizer(endpoint, data_root))


def trace_items(endpoint: Endpoint, input_tokens: np.ndarray | None, output_tokens: np.ndarray | None, seed: int,
                data_root: Path) -> list[tuple[str, int]]:
    """One synthetic prompt a trace row, of the row's input and output lengths (where the row leaves one out, or the
    trace has no such column, drawn from the endpoint's prompts settings)."""
    spec = endpoint.prompts or Prompts()
    n = len(input_tokens if input_tokens is not None else output_tokens)
    rng = np.random.default_rng([seed, 2])
    drawn_in, drawn_out = draw_counts(spec.input_tokens, n, rng), draw_counts(spec.output_tokens, n, rng)
    inputs = drawn_in if input_tokens is None else np.where(input_tokens > 0, input_tokens, drawn_in)
    outputs = drawn_out if output_tokens is None else np.where(output_tokens > 0, output_tokens, drawn_out)
    return prompts_of_lengths(spec, inputs, outputs, rng, prompt_tokenizer(endpoint, data_root))


def token_counter(endpoint: Endpoint, items: list[tuple[str | list, int]], data_root: Path) -> TokenCounter | None:
    """With the endpoint's tokenizer (None without one): each prompt's length in its tokens, and the counter a
    sender fills a record's token counts with where the server reports none."""
    tokenizer = prompt_tokenizer(endpoint, data_root)
    return None if tokenizer is None else TokenCounter(tokenizer, [tokenizer.count_prompt(p) for p, *_ in items])


def prompt_bodies(endpoint: Endpoint, seed: int, data_root: Path, model_inputs: tuple[str, ...] = (),
                  items: list[tuple[str | list, int]] | None = None) -> list[bytes]:
    """The request bodies of a generative endpoint (of `items`, else of its prompt_items), encoded before the run
    (`model_inputs`: a triton-generate model's input names, from the endpoint check)."""
    spec = endpoint.prompts or Prompts()
    items = prompt_items(endpoint, seed, data_root) if items is None else items
    extra = body_extra(endpoint.protocol, spec)
    return [request_body(endpoint.protocol, endpoint.model, prompt, max_tokens, spec.ignore_eos, spec.stream,
                         min_tokens=spec.min_tokens, model_inputs=model_inputs,
                         extra=(extra or {}) | fields[0] if fields else extra)  # a line's own fields: last, they win
            for prompt, max_tokens, *fields in items]
