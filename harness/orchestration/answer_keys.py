"""The answer keys a run hands its embedded server's scripted models ([embedded.accuracy]): every graded prompt of
the endpoints the model serves, with the kind of answer its form asks for and the reference
(endpoints/serving/answers.py answers them)."""
from __future__ import annotations

import json
from pathlib import Path

from tailrace.contract.internal_processes import AnswerModel
from tailrace.contract.layout import accuracy_key, server_answers, write_atomic
from tailrace.contract.profile import Profile
from tailrace.contract.profile.base import EMBEDDED
from tailrace.harness.orchestration.endpoint_check import EndpointCheckError
from tailrace.harness.workload.graded_items import GradedItem, endpoint_prompts
from tailrace.harness.workload.prompts import PromptFileError

KINDS = {"gsm8k": "number", "choice": "letter", "generic": "text"}  # what each form's answer is


def _entry(item: GradedItem) -> tuple[str, dict] | None:
    """A graded item's key entry: its prompt (chat messages: the last user message) → the kind of answer its form
    asks for and the reference (None: a reference that is not a text or number, such as a JSON Schema)."""
    if isinstance(item.reference, (dict, list)):
        return None
    prompt = item.prompt if isinstance(item.prompt, str) else next(
        (m["content"] for m in reversed(item.prompt) if m.get("role") == "user"), None)
    if not prompt:
        return None
    return prompt, {"kind": KINDS[item.form], "reference": str(item.reference)}


def answer_models(profile: Profile, logs: Path, data_root: Path) -> dict[str, AnswerModel]:
    """Each [embedded.accuracy] model's AnswerModel, its key written under `logs` (EndpointCheckError naming the
    endpoint where its graded file cannot be read: nothing is started)."""
    out = {}
    for model, spec in profile.embedded.accuracy.items():
        key: dict[str, dict] = {}
        for ep in profile.endpoints:
            if ep.url != EMBEDDED or ep.model != model or ep.prompts is None or ep.prompts.graded is None:
                continue
            try:
                _, graded = endpoint_prompts(ep, profile.load.seed, data_root)
            except PromptFileError as exc:
                raise EndpointCheckError(f"endpoint {ep.name}: {exc}") from None
            assert graded is not None
            key.update(e for e in map(_entry, graded.graded) if e is not None)
        path = write_atomic(accuracy_key(logs, model), json.dumps(key))
        out[model] = AnswerModel(key_file=path.resolve(), answers_file=server_answers(logs).resolve(),
                                 correct=spec.correct, fall_per_seq=spec.fall_per_seq, floor=spec.floor,
                                 answer_after_tokens=spec.answer_after_tokens, seed=profile.load.seed)
    return out
