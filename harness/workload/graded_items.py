"""A graded file's items, and the endpoint's prompts with them mixed in at their declared share.

Forms (one JSON object a line): GSM8K (`question`, `answer` ending `#### N`), multiple choice (`question`,
`choices`, `answer` as a letter or a 0-based index) and generic (`prompt` or `messages`, `reference`, optionally its
own `grader`). A line missing what its form needs, an unknown grader or a Python grader that cannot be imported is a
GradedFileError naming the file and line (or the grader) before any load.
"""
from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tailrace.contract.profile import Endpoint, Prompts
from tailrace.contract.profile.grading import FORM_GRADER, FORM_TEMPLATE, Graded, grader_kind
from tailrace.harness.workload.graders import Grader, load_grader
from tailrace.harness.workload.prompts import (
    PromptFileError,
    data_path,
    draw_counts,
    json_lines,
    line_prompt,
    prompt_items,
)

LETTERS = string.ascii_uppercase
GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.S)


class GradedFileError(PromptFileError):
    """A graded file, a line of it, or its grader that cannot be used."""


@dataclass(frozen=True)
class GradedItem:
    """One graded line: what is asked, the reference answer, the grader that judges a reply to it."""

    line: int
    prompt: str | list
    reference: Any
    grader: str
    max_tokens: int | None = None
    form: str = "generic"  # gsm8k | choice | generic


def _form_of(doc: dict) -> str:
    if "choices" in doc:
        return "choice"
    if "question" in doc and "answer" in doc:
        return "gsm8k"
    return "generic"


def _text(doc: dict, key: str, where: str, form: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value.strip():
        raise GradedFileError(f"{where}: a {form} line needs {key} (a non-empty string)")
    return value


def _render(template: str, fields: dict[str, str], where: str) -> str:
    try:
        return template.format_map(fields)
    except KeyError as exc:
        raise GradedFileError(f"{where}: the template names {{{exc.args[0]}}}, which this line's form does not give "
                              f"(it gives {', '.join('{' + k + '}' for k in fields)})") from None
    except (ValueError, IndexError) as exc:
        raise GradedFileError(f"{where}: the template cannot be filled: {exc}") from None


def _gsm8k(doc: dict, where: str, template: str) -> tuple[str, str]:
    question = _text(doc, "question", where, "gsm8k")
    answer = doc.get("answer")
    found = GSM8K_ANSWER.search(answer) if isinstance(answer, str) else None
    if found is None:
        raise GradedFileError(f"{where}: a gsm8k line needs answer ending '#### N' (the reference number)")
    return _render(template, {"question": question}, where), found.group(1).replace(",", "").strip()


def _choice(doc: dict, where: str, template: str) -> tuple[str, str]:
    question = _text(doc, "question", where, "choice")
    choices = doc.get("choices")
    if not isinstance(choices, list) or not 2 <= len(choices) <= len(LETTERS) or not all(
            isinstance(c, (str, int, float)) and not isinstance(c, bool) for c in choices):
        raise GradedFileError(f"{where}: a choice line needs choices (a list of 2 to 26 texts)")
    answer = doc.get("answer")
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(choices):
        letter = LETTERS[answer]
    elif isinstance(answer, str) and answer.strip().upper() in LETTERS[:len(choices)]:
        letter = answer.strip().upper()
    else:
        raise GradedFileError(f"{where}: a choice line needs answer: a letter A–{LETTERS[len(choices) - 1]} or an "
                              f"index 0–{len(choices) - 1}, got {answer!r}")
    lettered = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))
    return _render(template, {"question": question, "choices": lettered}, where), letter


def _generic(doc: dict, where: str, template: str | None) -> tuple[str | list, Any]:
    prompt = line_prompt(doc)
    if prompt is None:
        raise GradedFileError(f"{where}: a generic line needs prompt (a non-empty string) or messages (a list of "
                              "{\"role\", \"content\"} objects)")
    if "reference" not in doc or doc["reference"] is None:
        raise GradedFileError(f"{where}: a generic line needs reference (the answer it is graded against)")
    if isinstance(prompt, str) and template is not None:
        prompt = _render(template, {"prompt": prompt}, where)
    return prompt, doc["reference"]


def read_graded(spec: Graded, path: Path, default_grader: str | None = None) -> list[GradedItem]:
    """Every line of a graded file as a GradedItem (GradedFileError naming the file and line)."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise GradedFileError(f"{path}: {exc.strerror or exc}") from None
    docs = json_lines(path, lines, GradedFileError, "(a graded item)")
    if not docs:
        raise GradedFileError(f"{path}: no graded items")
    form = spec.form if spec.form != "auto" else _form_of(docs[0][1])
    grader = spec.grader or default_grader or FORM_GRADER[form]
    template = spec.template or (FORM_TEMPLATE[form] if form != "generic" else None)
    items = []
    for n, doc in docs:
        where = f"{path}:{n}"
        if form == "gsm8k":
            prompt, reference = _gsm8k(doc, where, template or FORM_TEMPLATE["gsm8k"])
        elif form == "choice":
            prompt, reference = _choice(doc, where, template or FORM_TEMPLATE["choice"])
        else:
            prompt, reference = _generic(doc, where, template)
        own = doc.get("grader", grader) if form == "generic" else grader
        try:
            if not isinstance(own, str):
                raise ValueError(f"grader must be a text (a grader's name or module:function), got {own!r}")
            grader_kind(own)
        except ValueError as exc:
            raise GradedFileError(f"{where}: {exc}") from None
        max_tokens = doc.get("max_tokens", spec.max_tokens)
        if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                       or max_tokens < 1):
            raise GradedFileError(f"{where}: max_tokens must be a whole number ≥ 1, got {max_tokens!r}")
        items.append(GradedItem(n, prompt, reference, own, max_tokens, form))
    return items


@dataclass(frozen=True)
class GradedPrompts:
    """An endpoint's prompts with its graded items in them: `items` as prompt_items gives them, `refs[i]` the graded
    item prompt i carries (-1: an ordinary prompt), each grader loaded once."""

    items: list[tuple[str | list, int]]
    refs: list[int]
    graded: list[GradedItem]
    graders: dict[str, Grader]
    spec: Graded

    def item_of(self, index: int) -> GradedItem | None:
        ref = self.refs[index % len(self.refs)]
        return self.graded[ref] if ref >= 0 else None


def graded_prompts(endpoint: Endpoint, seed: int, data_root: Path,
                   ordinary: list[tuple[str | list, int]] | None) -> GradedPrompts:
    """The endpoint's graded prompts: every graded item (share 1), or its ordinary prompts with graded items at
    `share` of the places (seeded, the same on every worker; enough places that every item has one), in the file's
    order, cycling."""
    spec = endpoint.prompts or Prompts()
    graded_spec = spec.graded
    assert graded_spec is not None
    graded = read_graded(graded_spec, data_path(graded_spec.file, data_root))
    graders = {}
    for name in sorted({g.grader for g in graded}):
        try:
            graders[name] = load_grader(name, graded_spec, data_root)
        except ValueError as exc:
            raise GradedFileError(f"{graded_spec.file}: {exc}") from None
    rng = np.random.default_rng([seed, 74])
    default_max = draw_counts(spec.output_tokens, len(graded), rng)
    asked = [(g.prompt, int(g.max_tokens or k)) for g, k in zip(graded, default_max)]
    if graded_spec.share >= 1 or not ordinary:
        return GradedPrompts(asked, list(range(len(graded))), graded, graders, graded_spec)
    places = max(len(ordinary), math.ceil(len(graded) / graded_spec.share))
    is_graded = np.zeros(places, dtype=bool)  # exactly the share of the places, so every item is asked
    is_graded[rng.permutation(places)[:max(len(graded), round(places * graded_spec.share))]] = True
    items: list[tuple[str | list, int]] = []
    refs: list[int] = []
    g = o = 0
    for flag in is_graded.tolist():
        if flag:
            items.append(asked[g % len(asked)])
            refs.append(g % len(asked))
            g += 1
        else:
            items.append(ordinary[o % len(ordinary)])
            refs.append(-1)
            o += 1
    return GradedPrompts(items, refs, graded, graders, graded_spec)


def endpoint_prompts(endpoint: Endpoint, seed: int, data_root: Path
                     ) -> tuple[list[tuple[str | list, int]], GradedPrompts | None]:
    """A generative endpoint's prompts (prompt_items) — with its graded items where `prompts.graded` names a file —
    and what grades their replies (None: nothing graded)."""
    spec = endpoint.prompts or Prompts()
    if spec.graded is None:
        return prompt_items(endpoint, seed, data_root), None
    ordinary = prompt_items(endpoint, seed, data_root) if spec.graded.share < 1 else None
    graded = graded_prompts(endpoint, seed, data_root, ordinary)
    return graded.items, graded
