"""Graders: a reply and its reference → correct, wrong or unparsable. Pure functions (a user's `module:function`
aside), each a few microseconds on a reply of a few hundred words; `grade_request` adds what the request itself
says (cut, error, truncated) — docs/METHODS.md, "Accuracy under load"."""
from __future__ import annotations

import importlib
import json
import re
import sys
import unicodedata
from pathlib import Path
from typing import Any, Callable

from tailrace.contract.profile.grading import Graded

CORRECT, WRONG, UNPARSABLE = "correct", "wrong", "unparsable"
TRUNCATED, CUT, ERROR, GRADER_ERROR = "truncated", "cut", "error", "grader_error"
GRADES = (CORRECT, WRONG, UNPARSABLE, TRUNCATED, CUT, ERROR, GRADER_ERROR)
CUT_OUTCOMES = frozenset({"cut", "timeout", "ttft_timeout", "cancelled"})

Grader = Callable[[str, Any], str]
"""(reply, reference) → correct | wrong | unparsable; raises where it cannot judge (recorded grader_error)."""

_NUMBER = re.compile(r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)")
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S | re.I)
_ANSWER_LETTER = re.compile(r"answer(?:\s+is)?\s*[:\-]?\s*\(?\*{0,2}([A-Z])\b", re.I)
_LONE_LETTER = re.compile(r"^\W*([A-Z])\W*$")
_LETTER = re.compile(r"(?<![A-Za-z])\(?([A-Z])[).:](?=\s|$)")  # "(B)", "B)", "B." or "B:" — never a lone "I"


def normalise(text: str) -> str:
    """Case-folded, accents kept, markup and surrounding punctuation dropped, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", str(text)).replace("**", "").replace("`", "")
    return " ".join(text.casefold().split()).strip(" .,;:!?\"'()[]")


def last_number(reply: str) -> float | None:
    """The number after the reply's last '####' if it has one, else its last number (thousands' commas dropped)."""
    tail = reply.rsplit("####", 1)[1] if "####" in reply else reply
    found = _NUMBER.findall(tail)
    if not found:
        return None
    pick = found[0] if "####" in reply else found[-1]
    try:
        return float(pick.replace(",", ""))
    except ValueError:
        return None


def choice_letter(reply: str) -> str | None:
    """The letter a reply chose: after 'answer (is)', else a reply that is only a letter, else its last letter
    marked as a choice ("(B)", "B.", "B)")."""
    found = _ANSWER_LETTER.findall(reply)
    if found:
        return found[-1].upper()
    lone = _LONE_LETTER.match(reply.strip())
    if lone:
        return lone.group(1)
    alone = _LETTER.findall(reply)
    return alone[-1] if alone else None


def exact(reply: str, reference: Any) -> str:
    return CORRECT if normalise(reply) == normalise(reference) else WRONG


def contains(reply: str, reference: Any) -> str:
    references = reference if isinstance(reference, list) else [reference]
    said = normalise(reply)
    return CORRECT if any(normalise(r) in said for r in references) else WRONG


def number_within(tolerance: float) -> Grader:
    def grade(reply: str, reference: Any) -> str:
        got = last_number(reply)
        if got is None:
            return UNPARSABLE
        return CORRECT if abs(got - float(str(reference).replace(",", ""))) <= tolerance else WRONG
    return grade


def choice(reply: str, reference: Any) -> str:
    got = choice_letter(reply)
    if got is None:
        return UNPARSABLE
    return CORRECT if got == str(reference).strip().upper() else WRONG


def regex(pattern: str) -> Grader:
    compiled = re.compile(pattern)

    def grade(reply: str, reference: Any) -> str:
        matches = list(compiled.finditer(reply))
        if not matches:
            return UNPARSABLE
        last = matches[-1]
        return exact(last.group(1) if compiled.groups else last.group(0), reference)
    return grade


def json_schema(reply: str, reference: Any) -> str:
    """The reply (code fences dropped) is JSON that follows the reference JSON Schema."""
    from jsonschema import validators

    fenced = _FENCE.match(reply)
    try:
        doc = json.loads(fenced.group(1) if fenced else reply)
    except ValueError:
        return UNPARSABLE
    schema = json.loads(reference) if isinstance(reference, str) else reference
    return CORRECT if validators.validator_for(schema)(schema).is_valid(doc) else WRONG


def user_grader(name: str, data_root: Path) -> Grader:
    """A user's `module:function(reply, reference)` returning True / False, None (unparsable) or a grade's name;
    the module imported from the data root or the path (ValueError naming the grader when it cannot be)."""
    module_name, function = name.split(":")
    root = str(data_root.resolve())
    added = root not in sys.path
    if added:
        sys.path.insert(0, root)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any failure to import is the user's grader that cannot be used
        raise ValueError(f"grader {name}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    finally:
        if added:
            sys.path.remove(root)
    fn = getattr(module, function, None)
    if not callable(fn):
        raise ValueError(f"grader {name}: {module_name} has no function {function}")

    def grade(reply: str, reference: Any) -> str:
        verdict = fn(reply, reference)
        if verdict is None:
            return UNPARSABLE
        if isinstance(verdict, bool):
            return CORRECT if verdict else WRONG
        if verdict in (CORRECT, WRONG, UNPARSABLE):
            return verdict
        raise ValueError(f"grader {name} returned {verdict!r} (True, False, None, or correct | wrong | unparsable)")
    return grade


def load_grader(name: str, spec: Graded, data_root: Path) -> Grader:
    """The grader a profile or a line names (ValueError naming it when it cannot be loaded)."""
    builtin: dict[str, Callable[[], Grader]] = {
        "exact": lambda: exact, "contains": lambda: contains, "choice": lambda: choice,
        "json_schema": lambda: json_schema, "last_number": lambda: number_within(spec.tolerance),
        "regex": lambda: regex(spec.pattern or r"(.*)")}
    if name in builtin:
        if name == "regex" and spec.pattern is None:
            raise ValueError("grader regex needs graded.pattern")
        return builtin[name]()
    return user_grader(name, data_root)


def grade_request(status: str, stream_outcome: str, finish_reason: str, reply: str, reference: Any,
                  grader: Grader) -> str:
    """A graded request's grade: cut (timed out, cancelled, its stream cut) and error (no answer) before any
    grading; then the grader's verdict, where a reply that is not correct and stopped at max_tokens is truncated;
    grader_error where the grader raised."""
    if status == "cancelled" or status == "timeout" or stream_outcome in CUT_OUTCOMES:
        return CUT
    if status != "ok":
        return ERROR
    try:
        verdict = grader(reply, reference)
    except Exception:  # noqa: BLE001 - a grader that fails on one reply costs that request's grade, not the run
        return GRADER_ERROR
    if verdict != CORRECT and finish_reason == "length":
        return TRUNCATED
    return verdict
