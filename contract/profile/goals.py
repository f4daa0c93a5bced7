"""Pipelines across endpoints and the SLOs a run is judged on."""
from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from tailrace.contract.apis import APIS
from tailrace.contract.profile.base import (
    NAME,
    TokenCount,
    _Strict,
)
from tailrace.contract.profile.grading import grader_kind

PIPELINE_KINDS = {a.name: a.pipeline_kind for a in APIS if a.pipeline_kind}  # a stage's kind, by protocol
RAG_PROMPT = ("Answer the question from the passages below.\n\n{passages}\n\nQuestion: {query}\nAnswer:")


class PipelineStage(_Strict):
    """One stage of a pipeline: a request to one of the profile's endpoints, made from the earlier stages' replies
    — what it does follows from the endpoint's protocol: embed the query (openai-embeddings), rerank the query
    against the candidate passages (rerank), generate from the best passages (openai-chat, openai-completions,
    triton-generate)."""

    endpoint: str = Field(pattern=NAME, description="the endpoint this stage sends to")
    pause_ms: float = Field(0, ge=0, le=3_600_000, description="a declared pause before this stage (retrieval, "
                                                                "tool time): its send is due at the stage before's "
                                                                "end + pause_ms")
    top_n: int = Field(3, ge=1, le=1_000, description="rerank: how many passages, by the reply's scores, the next "
                                                     "stages carry")


class Pipeline(_Strict):
    """A chain of stages over the profile's endpoints, started by the arrival process: stage k+1 is due at stage
    k's end (+ its pause); the pipeline's end-to-end and its time to the answer's first token count from the
    arrival's intended send."""

    name: str = Field(pattern=NAME)
    weight: float = Field(1.0, gt=0, description="share of the arrivals, beside the endpoints' weights")
    stages: list[PipelineStage] = Field(min_length=1, max_length=16)
    file: str | None = Field(None, min_length=1, description="a RAG JSONL file, one {\"query\": …, \"documents\": "
                             "[…]} a line (also \"passages\" or \"candidates\": MS MARCO / BEIR style); default: "
                             "the rerank stage's endpoint's queries and documents (drawn, or its rerank.file)")
    prompt: str = Field(RAG_PROMPT, min_length=1, description="the generate stage's prompt: {passages} (the "
                        "reranked top_n, numbered) and {query}")
    max_tokens: TokenCount | None = Field(None, description="the generate stage's max_tokens (default: its "
                                          "endpoint's prompts.output_tokens)")
    grader: str = Field("contains", description="where the RAG file's lines carry a \"reference\" (or \"answer\"): "
                        "the grader of the generate stage's answer (prompts.graded's graders; default contains)")

    @model_validator(mode="after")
    def _prompt(self) -> "Pipeline":
        if "{query}" not in self.prompt:
            raise ValueError("prompt: must hold {query} (and may hold {passages})")
        grader_kind(self.grader)
        return self


TOKEN_METRICS = ("ttft", "tpot", "itl", "e2e")  # generative endpoints' (docs/METHODS.md, "Streams")
PIPELINE_METRICS = ("pipeline_e2e", "pipeline_ttft")


class Slo(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)  # (`min`: an alias)
    metric: Literal["latency", "error_rate", "ttft", "tpot", "itl", "e2e", "pipeline_e2e", "pipeline_ttft",
                    "accuracy"] = Field(
        description="latency (from the intended send), error_rate, a streamed request's ttft, tpot, itl, e2e, a "
                    "pipeline's end-to-end time or time to its answer's first token (from its arrival's intended "
                    "send), or accuracy (graded items: the share answered right, at least `min`)")
    percentile: float | None = Field(None, gt=0, lt=100)
    threshold_ms: float | None = Field(None, gt=0)
    threshold: float | None = Field(None, ge=0, le=1, description="error-rate bound (fraction)")
    minimum: float | None = Field(None, alias="min", gt=0, le=1, description="accuracy: the lowest share of graded "
                                                                             "answers right that passes")
    endpoint: str = "*"
    region: str = "*"
    pipeline: str = Field("*", description="pipeline_e2e / pipeline_ttft: the pipeline it is for")
    model: str = Field("*", description="a streamed endpoint's model of its mix: the SLO judges that model's requests")

    @model_validator(mode="after")
    def _complete(self) -> "Slo":
        if self.metric in PIPELINE_METRICS and self.endpoint != "*":
            raise ValueError(f"a {self.metric} SLO names its pipeline (pipeline = …), not an endpoint")
        if self.metric not in PIPELINE_METRICS and self.pipeline != "*":
            raise ValueError(f"pipeline: only for pipeline_e2e and pipeline_ttft SLOs, not {self.metric}")
        if self.metric == "accuracy":
            if self.minimum is None:
                raise ValueError("an accuracy SLO needs min (the lowest share of graded answers right)")
            if self.percentile is not None or self.threshold_ms is not None or self.threshold is not None:
                raise ValueError("an accuracy SLO takes min only (no percentile, threshold_ms or threshold)")
            return self
        if self.minimum is not None:
            raise ValueError(f"min: only for accuracy SLOs, not {self.metric}")
        if self.metric != "error_rate" and (self.percentile is None or self.threshold_ms is None):
            raise ValueError(f"a {self.metric} SLO needs percentile and threshold_ms")
        if self.metric == "error_rate" and self.threshold is None:
            raise ValueError("an error_rate SLO needs threshold")
        return self
