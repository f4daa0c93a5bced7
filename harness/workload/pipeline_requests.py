"""What a pipeline's stages send, each request made at its stage's send from the pipeline's query and the replies
before it: an embed stage embeds the query; a rerank stage scores the passages carried so far against it (the
RAG file's candidates, or those of the rerank endpoint's own items), and the stages after it carry its best top_n
by score; a generate stage asks for the answer with the passages carried in its prompt (`pipeline.prompt`). The
queries and candidates are the same on every worker (a file's, or drawn from the run's seed); a pipeline's item is
its arrival's sample."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tailrace.contract.profile import PIPELINE_KINDS, Endpoint, Pipeline, Profile, Prompts
from tailrace.contract.profile.grading import Graded
from tailrace.harness.client.apis import body_extra
from tailrace.harness.client.generative import request_body
from tailrace.harness.workload.graders import load_grader
from tailrace.harness.workload.pooling_requests import (
    embedding_body,
    prompt_text,
    rag_file,
    rerank_body,
    rerank_items,
)
from tailrace.harness.workload.prompts import PromptFileError, data_path, draw_counts, json_lines, prompt_items

MAX_TOKENS_STREAM = 6  # the seed's stream for a generate stage's max_tokens


@dataclass(frozen=True)
class StageRequest:
    """One stage's request: its body, the texts or documents it carries (a pooling request; 0: a generation), and
    its prompt's length in words (-1: not a prompt)."""

    body: bytes
    inputs: int
    prompt_tokens: int = -1


@dataclass(frozen=True)
class Stage:
    endpoint_index: int  # in the profile's endpoints
    endpoint: Endpoint
    kind: str  # embed | rerank | generate (contract/profile/ PIPELINE_KINDS)
    pause_ns: int
    top_n: int


def pipeline_items(pipeline: Pipeline, endpoints: dict[str, Endpoint], seed: int, data_root: Path
                   ) -> list[tuple[str, list[str]]]:
    """(query, candidate passages) of each item: the pipeline's RAG file, else the rerank stage's endpoint's items
    (drawn, or its rerank.file), else the first stage's endpoint's prompts as queries with no passages. A bad file
    is a PromptFileError naming it and the line."""
    if pipeline.file is not None:
        return rag_file(data_path(pipeline.file, data_root))
    stage_eps = [endpoints[s.endpoint] for s in pipeline.stages]
    rerank = next((e for e in stage_eps if e.protocol == "rerank"), None)
    if rerank is not None:
        return rerank_items(rerank, seed, data_root)
    return [(prompt_text(p), []) for p, *_ in prompt_items(stage_eps[0], seed, data_root)]


REFERENCE_KEYS = ("reference", "answer", "answers")


def rag_references(path: Path) -> list:
    """Each RAG line's reference answer, in rag_file's order (None: the line has none)."""
    lines = path.read_text().splitlines()
    return [next((doc[k] for k in REFERENCE_KEYS if doc.get(k) is not None), None)
            for _, doc in json_lines(path, lines, PromptFileError)]


class PipelineRequests:
    """One pipeline's stages and items: each stage's request, made from the item and the passages carried."""

    def __init__(self, pipeline: Pipeline, profile: Profile, seed: int, data_root: Path,
                 model_inputs: dict[str, tuple[str, ...]] | None = None) -> None:
        by_name = {e.name: e for e in profile.endpoints}
        self.pipeline, self.name = pipeline, pipeline.name
        self.stages = [Stage(profile.endpoints.index(by_name[s.endpoint]), by_name[s.endpoint],
                             PIPELINE_KINDS[by_name[s.endpoint].protocol], int(s.pause_ms * 1e6), s.top_n)
                       for s in pipeline.stages]
        self.items = pipeline_items(pipeline, by_name, seed, data_root)
        last = self.stages[-1].endpoint
        spec = last.prompts or Prompts()
        asked = pipeline.max_tokens or spec.output_tokens
        self.max_tokens = draw_counts(asked, len(self.items), np.random.default_rng([seed, MAX_TOKENS_STREAM]))
        self.model_inputs = (model_inputs or {}).get(last.name, ())
        self.references: list = []
        self.grader = None
        if pipeline.file is not None and self.stages[-1].kind == "generate":
            self.references = rag_references(data_path(pipeline.file, data_root))
            if any(r is not None for r in self.references):
                try:
                    self.grader = load_grader(pipeline.grader, Graded(file=pipeline.file, grader=pipeline.grader),
                                              data_root)
                except ValueError as exc:
                    raise PromptFileError(f"pipeline {pipeline.name}: {exc}") from None

    def __len__(self) -> int:
        return len(self.items)

    def item(self, sample: int) -> tuple[str, list[str]]:
        return self.items[sample % len(self.items)]

    def graded_by(self, sample: int) -> tuple | None:
        """(item, reference, grader) of item `sample`'s answer, where its line carries a reference (else None)."""
        if self.grader is None:
            return None
        at = sample % len(self.items)
        reference = self.references[at] if at < len(self.references) else None
        return None if reference is None else (at, reference, self.grader)

    def request(self, k: int, sample: int, passages: list[str]) -> StageRequest:
        """Stage k's (0..) request for item `sample`, carrying `passages`."""
        stage, (query, _) = self.stages[k], self.item(sample)
        ep = stage.endpoint
        if stage.kind == "embed":
            body = embedding_body(ep, [query])
            return StageRequest(body.body, body.inputs)
        if stage.kind == "rerank":
            body = rerank_body(ep, query, passages)
            return StageRequest(body.body, body.inputs)
        numbered = "\n\n".join(f"[{i + 1}] {text}" for i, text in enumerate(passages))
        prompt = self.pipeline.prompt.replace("{passages}", numbered).replace("{query}", query)
        spec = ep.prompts or Prompts()
        return StageRequest(request_body(ep.protocol, ep.model, prompt, int(self.max_tokens[sample % len(self.items)]),
                                         spec.ignore_eos, spec.stream, spec.min_tokens, self.model_inputs,
                                         body_extra(ep.protocol, spec)), 0,
                            len(prompt.split()))

    def carried(self, k: int, passages: list[str], ranked: list[int] | None) -> list[str]:
        """The passages the stages after stage k carry: a rerank stage's best top_n by its reply's scores."""
        stage = self.stages[k]
        if stage.kind != "rerank" or ranked is None:
            return passages
        return [passages[i] for i in ranked[:stage.top_n] if i < len(passages)]
