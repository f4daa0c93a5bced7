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
from tailrace.harness.workload.conversations import SessionFileError, session_source
from tailrace.harness.workload.graded_items import GradedItem, endpoint_prompts
from tailrace.harness.workload.pipeline_requests import rag_references
from tailrace.harness.workload.pooling_requests import rag_file
from tailrace.harness.workload.prompts import PromptFileError, data_path

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
        key.update(_chain_entries(profile, model, data_root))
        path = write_atomic(accuracy_key(logs, model), json.dumps(key))
        out[model] = AnswerModel(key_file=path.resolve(), answers_file=server_answers(logs).resolve(),
                                 correct=spec.correct, fall_per_seq=spec.fall_per_seq, floor=spec.floor,
                                 answer_after_tokens=spec.answer_after_tokens, seed=profile.load.seed)
    return out


def _chain_entries(profile: Profile, model: str, data_root: Path) -> dict[str, dict]:
    """Key entries for the graded answers of chains on `model`: a pipeline's RAG lines with a reference (their
    query, which the answer's prompt holds) and a sessionized file's turns with one (the turn's text)."""
    by_name = {e.name: e for e in profile.endpoints}
    out: dict[str, dict] = {}
    for pipeline in profile.pipelines:
        last = by_name[pipeline.stages[-1].endpoint]
        if pipeline.file is None or last.url != EMBEDDED or last.model != model:
            continue
        try:
            queries = [q for q, _ in rag_file(data_path(pipeline.file, data_root))]
            references = rag_references(data_path(pipeline.file, data_root))
        except PromptFileError as exc:
            raise EndpointCheckError(f"pipeline {pipeline.name}: {exc}") from None
        out.update({q: {"kind": "text", "reference": str(r)} for q, r in zip(queries, references)
                    if r is not None and not isinstance(r, (dict, list))})
    for ep in profile.endpoints:
        if ep.sessions is None or ep.url != EMBEDDED or ep.model != model:
            continue
        try:
            source, _ = session_source(ep, profile.load.seed, data_root)
        except (PromptFileError, SessionFileError) as exc:
            raise EndpointCheckError(f"endpoint {ep.name}: {exc}") from None
        for script in getattr(source, "scripts", []):
            out.update({turn.user: {"kind": "text", "reference": str(turn.reference)} for turn in script.turns
                        if turn.reference is not None and not isinstance(turn.reference, (dict, list))})
    return out
