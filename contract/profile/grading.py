"""Graded items: a generative endpoint's prompts (or a share of them) taken from a file whose lines carry their
reference answers, each reply graded as it is recorded (harness/workload/graded_items.py reads the file,
harness/workload/graders.py holds the graders)."""
from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from tailrace.contract.profile.base import _Strict

FORMS = ("auto", "gsm8k", "choice", "generic")
BUILTIN_GRADERS = ("exact", "last_number", "choice", "regex", "contains", "json_schema")
# each form's grader and prompt template where the profile names none
FORM_GRADER = {"gsm8k": "last_number", "choice": "choice", "generic": "exact"}
FORM_TEMPLATE = {
    "gsm8k": "Question: {question}\nSolve it step by step, then give the final answer as a number after '####'.",
    "choice": "{question}\n{choices}\nAnswer with the letter of the correct choice.",
    "generic": "{prompt}",
}
USER_GRADER = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # module:function


def grader_kind(name: str) -> str:
    """'builtin' or 'python' (a `module:function`); ValueError naming the grader otherwise."""
    if name in BUILTIN_GRADERS:
        return "builtin"
    if USER_GRADER.match(name):
        return "python"
    raise ValueError(f"grader {name!r}: one of {', '.join(BUILTIN_GRADERS)}, or a Python function as "
                     "module:function")


class Graded(_Strict):
    """`[endpoints.prompts.graded]`: graded items in the endpoint's open-loop stream."""

    file: str = Field(min_length=1, description="a JSONL file of graded items: GSM8K lines (question, answer ending "
                                                "'#### N'), multiple choice (question, choices, answer as a letter "
                                                "or an index) or generic (prompt or messages, reference, grader)")
    form: Literal[FORMS] = Field("auto", description="the lines' form (auto: from the first line's "  # type: ignore[valid-type]
                                                    "keys)")
    grader: str | None = Field(None, description="exact | last_number | choice | regex | contains | json_schema | "
                                                 "module:function (default: the form's — gsm8k last_number, choice "
                                                 "choice, generic exact; a generic line may name its own)")
    template: str | None = Field(None, min_length=1, description="the prompt made of a line: {question}, {choices} "
                                                                 "(lettered lines), {prompt} (default: the form's)")
    share: float = Field(1.0, gt=0, le=1, description="the fraction of the endpoint's requests that carry a graded "
                                                      "item; the rest are its prompts")
    tolerance: float = Field(1e-6, ge=0, description="last_number: the largest |answer − reference| that is correct")
    pattern: str | None = Field(None, min_length=1, description="regex: the answer is the pattern's first group "
                                                                "(or its whole match) at its last match in the reply")
    max_tokens: int | None = Field(None, ge=1, description="max_tokens of a graded request (default: the "
                                                           "endpoint's output_tokens)")

    @field_validator("grader")
    @classmethod
    def _known_grader(cls, v: str | None) -> str | None:
        if v is not None:
            grader_kind(v)
        return v

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return v

    @model_validator(mode="after")
    def _regex_has_pattern(self) -> "Graded":
        if self.grader == "regex" and self.pattern is None:
            raise ValueError("grader regex needs pattern")
        return self
