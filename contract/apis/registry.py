"""The serving APIs tailrace speaks, each declared once with its traits (after aiperf's endpoint `metadata()`): how
it is reached (URL schemes, the servers `tailrace run` can start for it), what kind of exchange it is (KServe
tensors, a generative stream, a pooling reply, a model run in the worker), where it sends (its routes), and which
of a profile's options it takes — sessions, images, audio, structured outputs, a model mix, cancellation, a JSON
body's extra fields, Triton's token-count output. Profile validation, `tailrace probe`, the senders and pipelines
read these traits; none spells a tuple of protocol names. Adding an API: docs/ARCHITECTURE.md, "Adding a serving
API"."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Literal

HTTP, GRPC = ("http", "https"), ("grpc", "grpcs")
Family = Literal["kserve", "generative", "pooling", "inprocess"]
PipelineKind = Literal["embed", "rerank", "generate"]


@dataclass(frozen=True)
class ServingApi:
    """One serving API's traits."""

    name: str  # the profile's `protocol`
    family: Family
    schemes: tuple[str, ...]  # the URL schemes it is spoken over
    routes: tuple[str, ...]  # where its requests go, the first its streamed requests' ('{model}': the model's name)
    summary: str  # one line: what it is, for the profile's documentation
    started: tuple[str, ...] = ()  # the servers `tailrace run` starts that serve it ('embedded', 'triton')
    conversation: bool = False  # a conversation of messages: sessions carry it; images go as content parts
    sessions: bool = False  # a turn carries the conversation (or the text) so far
    server_state: bool = False  # a session may keep its state on the server (previous_response_id)
    images: bool = False
    audio: bool = False
    structured: str | None = None  # the body's field a JSON Schema goes in (structured outputs), None: no such field
    model_in_body: bool = False  # the model is named in a JSON body: a weighted mix of models (and LoRAs) can be drawn
    json_body: bool = False  # a JSON body: prompts.extra_body's fields may be added
    cancel: bool = False  # a streamed HTTP reply a client can abandon part-way (the endpoint's `cancel`)
    token_count_output: bool = False  # a tensor reply: the output tensor that counts tokens may be named
    model_metadata: bool = False  # its request is built from the model's KServe metadata (inputs, datatypes, shapes)
    pipeline_kind: PipelineKind | None = None  # the stage a pipeline makes of it
    whole_route: str | None = None  # where a whole (not streamed) reply is asked for, where it is another route

    def route(self, model: str = "", stream: bool = True) -> str:
        """The route a request posts to."""
        return (self.routes[0] if stream or self.whole_route is None else self.whole_route).format(model=model)

    @property
    def generative(self) -> bool:
        """Streams tokens (TTFT, TPOT, ITL)."""
        return self.family == "generative"

    @property
    def pooling(self) -> bool:
        """Texts in, numbers out (vectors, scores): one whole reply."""
        return self.family == "pooling"

    @property
    def grpc(self) -> bool:
        return self.schemes == GRPC


_JSON_STREAM = ServingApi("", "generative", HTTP, (), "", started=("embedded",), sessions=True, model_in_body=True,
                          json_body=True, cancel=True, pipeline_kind="generate")


def _json_stream(name: str, route: str, summary: str, **traits: Any) -> ServingApi:
    """A streamed JSON API of OpenAI's or Anthropic's kind: sessions, a model mix, extra body fields, cancellation."""
    return replace(_JSON_STREAM, name=name, routes=(route,), summary=summary, **traits)


APIS: tuple[ServingApi, ...] = (
    ServingApi("kserve-http", "kserve", HTTP, ("/v2/models/{model}/infer",),
               "KServe v2 inference over HTTP/JSON (Triton, tailrace serve, any compliant server)",
               started=("embedded", "triton"), model_metadata=True),
    ServingApi("kserve-grpc", "kserve", GRPC, ("inference.GRPCInferenceService/ModelInfer",),
               "KServe v2 inference over gRPC", started=("embedded", "triton"), model_metadata=True),
    ServingApi("inprocess", "inprocess", (), (), "the model's ONNX file run inside the worker: a no-network baseline"),
    _json_stream("openai-chat", "/v1/chat/completions", "streamed OpenAI chat completions", conversation=True,
                 images=True, audio=True, structured="response_format"),
    _json_stream("openai-completions", "/v1/completions", "streamed OpenAI completions", structured="response_format"),
    _json_stream("anthropic-messages", "/v1/messages", "streamed Anthropic Messages (anthropic-version 2023-06-01)",
                 conversation=True, images=True),
    _json_stream("openai-responses", "/v1/responses", "streamed OpenAI Responses (store false)", conversation=True,
                 images=True, server_state=True, structured="text.format"),
    ServingApi("triton-generate", "generative", HTTP, ("/v2/models/{model}/generate_stream",),
               "Triton's generate extension, streamed", started=("embedded", "triton"), json_body=True, cancel=True,
               token_count_output=True, model_metadata=True, pipeline_kind="generate",
               whole_route="/v2/models/{model}/generate"),
    ServingApi("kserve-grpc-stream", "generative", GRPC, ("inference.GRPCInferenceService/ModelStreamInfer",),
               "ModelStreamInfer on a decoupled model (Triton's gRPC streams)", started=("embedded", "triton"),
               token_count_output=True, model_metadata=True),
    ServingApi("openai-embeddings", "pooling", HTTP, ("/v1/embeddings",),
               "embeddings (vLLM, TEI, Infinity, llama.cpp, Triton's OpenAI frontend)", started=("embedded",),
               json_body=True, pipeline_kind="embed"),
    ServingApi("rerank", "pooling", HTTP, ("/rerank", "/v1/rerank", "/v2/rerank", "/score"),
               "a query and documents scored (vLLM, TEI, Infinity, Cohere-style)", started=("embedded",),
               json_body=True, pipeline_kind="rerank"),
)
REGISTRY: dict[str, ServingApi] = {a.name: a for a in APIS}


def serving_api(name: str) -> ServingApi:
    """The API a profile's `protocol` names (KeyError: none)."""
    return REGISTRY[name]


def names_where(trait: Callable[[ServingApi], object]) -> tuple[str, ...]:
    """The APIs with `trait` (a predicate on their traits), in the registry's order."""
    return tuple(a.name for a in APIS if trait(a))


def listed(names: tuple[str, ...]) -> str:
    """'a, b and c': names in a sentence."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
