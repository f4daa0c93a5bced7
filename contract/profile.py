"""Scenario profiles (TOML): schema, validation with errors that name the file and the field path."""
from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tailrace.contract.apis import APIS, ServingApi, listed, names_where, serving_api
from tailrace.contract.trace_context import Sample

EMBEDDED = "embedded"
TRITON = "triton"
INPROCESS = "inprocess"
STARTED_BY_RUN = (EMBEDDED, TRITON)
MASTER_CLOCK = "master"  # clock.servers: the SNTP reference `tailrace master` answers on its host


class _Strict(BaseModel):
    # strict: a number must be a number ("100" is refused), no silent coercion
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


NAME = r"^[A-Za-z0-9_.-]{1,64}$"  # names become file names and metric labels
# each serving API's traits are declared once, in contract/apis/registry.py; these name its groups for readers
GENERATIVE = names_where(lambda a: a.generative)  # streamed generation (TTFT, TPOT, ITL)
CHAT_APIS = names_where(lambda a: a.conversation)  # a conversation of messages
POOLING = names_where(lambda a: a.pooling)  # texts in, numbers out (vectors, scores): one whole reply
TLS_SCHEMES = ("https", "grpcs")


def check_url(url: str, schemes: tuple[str, ...]) -> str:
    """A network address `scheme://host[:port][/path]` with a host, no blanks, and a port in 1-65535."""
    if re.search(r"\s", url):
        raise ValueError(f"{url!r} contains blanks")
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise ValueError(f"{url!r}: the scheme must be {' or '.join(s + '://' for s in schemes)}")
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r}: the port must be a number from 1 to 65535") from None
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{url!r}: the port must be a number from 1 to 65535")
    if port is None and parts.scheme in ("grpc", "grpcs"):
        raise ValueError(f"{url!r}: a gRPC address needs a port")
    return url


DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64",
             "BF16", "BYTES")


class DeclaredTensor(_Strict):
    """A model input as the server's metadata would give it (for servers that expose none)."""

    name: str = Field(min_length=1)
    datatype: Literal[DATATYPES]  # type: ignore[valid-type]  # (the tuple's values: pydantic reads it at run time)
    shape: list[int] = Field(description="as in model metadata: -1 for a dynamic dimension; a leading -1 on every "
                                         "input is the batch dimension")

    @field_validator("shape")
    @classmethod
    def _dims(cls, v: list[int]) -> list[int]:
        if any(d < -1 or d == 0 for d in v):
            raise ValueError(f"{v}: each dimension is a size >= 1 or -1 (dynamic)")
        return v


class Check(_Strict):
    """Are the answers right? `label`: the output's value per row equals the data's label; `argmax`: the index of
    the output row's largest value equals it; `validation`: every output equals the data file's
    validation_data within rtol / atol."""

    kind: Literal["label", "argmax", "validation"] = "label"
    output: str | None = Field(None, description="the output compared with the labels (label / argmax)")
    labels: str = Field("labels", description="the data's label array (.npz) or key (.jsonl)")
    rtol: float = Field(1e-3, ge=0)
    atol: float = Field(1e-5, ge=0)

    @model_validator(mode="after")
    def _output(self) -> "Check":
        if self.kind in ("label", "argmax") and not self.output:
            raise ValueError(f"output: a {self.kind!r} check names the output it compares")
        return self


class Tls(_Strict):
    """TLS of an https:// or grpcs:// endpoint: the CA bundle that signs the server's certificate (default: the
    system's), a client certificate and key for mutual TLS, and the name the server's certificate must carry
    (default: the URL's host). Paths are on the generator's machine."""

    ca: str | None = Field(None, min_length=1, description="PEM CA bundle (default: the system's trust store)")
    cert: str | None = Field(None, min_length=1, description="PEM client certificate (mutual TLS)")
    key: str | None = Field(None, min_length=1, description="PEM private key of the client certificate")
    server_name: str | None = Field(None, min_length=1, description="the name checked in the server's certificate "
                                                                    "(and sent as SNI)")

    @model_validator(mode="after")
    def _pair(self) -> "Tls":
        if (self.cert is None) != (self.key is None):
            raise ValueError("cert and key go together (mutual TLS needs both)")
        return self


def _fixed(value):
    """A bare number where a distribution is asked for: that number, fixed (`turns = 4`, `think_s = 0.3`)."""
    return {"mean": value} if isinstance(value, (int, float)) and not isinstance(value, bool) else value


class TokenCount(_Strict):
    """A number of tokens: a bare number or `mean` alone is fixed; else drawn (seeded) from `distribution`, kept in
    [min, max]."""

    mean: int = Field(ge=1, le=1_000_000)
    distribution: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    stddev: float = Field(0, ge=0, description="normal / lognormal: the standard deviation of the count")
    min: int | None = Field(None, ge=1, description="the smallest count drawn (uniform: the low end)")
    max: int | None = Field(None, ge=1, description="the largest count drawn (uniform: the high end)")

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, data):
        return _fixed(data)

    @model_validator(mode="after")
    def _bounds(self) -> "TokenCount":
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        if self.distribution == "uniform" and (self.min is None or self.max is None):
            raise ValueError("uniform needs min and max")
        if self.distribution in ("normal", "lognormal") and self.stddev <= 0:
            raise ValueError(f"{self.distribution} needs stddev > 0")
        return self


class Images(_Strict):
    """Images a chat request carries as OpenAI `image_url` content parts: synthetic (drawn width × height, encoded in
    `format`), a directory's files, or a prompt file's own (`"images"` / `"image"` on a JSONL line)."""

    per_request: TokenCount = Field(default_factory=lambda: TokenCount(mean=1), description="images a request "
                                    "carries, fixed or drawn per request")
    share: float = Field(1.0, gt=0, le=1, description="the share of requests that carry images (drawn per request "
                                                      "from the seed); the others are text only")
    width: TokenCount = Field(default_factory=lambda: TokenCount(mean=512), description="a synthetic image's width "
                              "in pixels, fixed or drawn")
    height: TokenCount = Field(default_factory=lambda: TokenCount(mean=512), description="its height in pixels")
    format: Literal["jpeg", "png", "webp"] = Field("jpeg", description="a synthetic image's encoding")
    dir: str | None = Field(None, min_length=1, description="a directory of image files (.jpg, .jpeg, .png, .webp, "
                            ".gif, .bmp) taken in turn instead of synthetic ones; each is decoded once before the run")
    distinct: int = Field(64, ge=1, le=10_000, description="synthetic: distinct images drawn; requests cycle "
                                                           "through them")


class Audio(_Strict):
    """Audio clips a chat request carries as OpenAI `input_audio` content parts (base64 wav or mp3): synthetic
    (a seeded tone of drawn length, 16 kHz mono wav), a directory's files, or a prompt file's own (`"audio"`)."""

    per_request: TokenCount = Field(default_factory=lambda: TokenCount(mean=1), description="clips a request "
                                    "carries, fixed or drawn per request")
    share: float = Field(1.0, gt=0, le=1, description="the share of requests that carry audio; the others none")
    seconds: float = Field(5.0, gt=0, le=3600, description="a synthetic clip's length")
    dir: str | None = Field(None, min_length=1, description="a directory of .wav and .mp3 files taken in turn "
                            "instead of synthetic clips")
    distinct: int = Field(16, ge=1, le=10_000, description="synthetic: distinct clips drawn")


class Structured(_Strict):
    """Structured outputs: the JSON Schema every reply must follow, asked of the server (OpenAI's `response_format`,
    Responses' `text.format`: vLLM's guided decoding, OpenAI, SGLang) and checked on every reply."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)  # (`schema`: an alias)
    schema_: dict[str, Any] = Field(alias="schema", description="the JSON Schema: an inline table, or a .json file "
                                                               "(read once, when the profile is read)")
    name: str = Field("output", pattern=r"^[A-Za-z0-9_-]{1,64}$", description="the schema's name (json_schema.name)")
    strict: bool = Field(True, description="ask the server to follow the schema exactly (json_schema.strict)")

    @model_validator(mode="before")
    @classmethod
    def _file(cls, data):
        if isinstance(data, dict) and isinstance(data.get("schema"), str):
            path = Path(data["schema"])
            try:
                schema = json.loads(path.read_text())
            except OSError as exc:
                raise ValueError(f"schema: cannot read {path}: {exc.strerror or exc}") from None
            except ValueError as exc:
                raise ValueError(f"schema: {path} is not JSON ({exc})") from None
            data = {**data, "schema": schema}
        return data

    @field_validator("schema_")
    @classmethod
    def _compiles(cls, v: dict[str, Any]) -> dict[str, Any]:
        from jsonschema.exceptions import SchemaError
        from jsonschema.validators import validator_for

        try:
            validator_for(v).check_schema(v)
        except SchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "(its root)"
            raise ValueError(f"not a valid JSON Schema at {where}: {exc.message}") from None
        return v


class Prompts(_Strict):
    """What a generative endpoint is sent: synthetic prompts (seeded from load.seed) or a JSONL file of them."""

    @model_validator(mode="before")
    @classmethod
    def _structured_ends(cls, data):
        """A structured output ends where its JSON does: ignore_eos off unless the profile says otherwise (refused)."""
        if isinstance(data, dict) and data.get("structured") is not None:
            if data.get("ignore_eos") is True:
                raise ValueError("ignore_eos: a structured output ends where its JSON does; leave ignore_eos out "
                                 "(it is false with structured) or set it false")
            data = {**data, "ignore_eos": False}
        return data

    input_tokens: TokenCount = Field(default_factory=lambda: TokenCount(mean=128),
                                     description="prompt length in tokens: exact in `tokenizer`'s tokens where the "
                                                 "profile names one, else in words (≈ tokens)")
    output_tokens: TokenCount = Field(default_factory=lambda: TokenCount(mean=64), description="max_tokens asked")
    count: int = Field(256, ge=1, le=100_000, description="distinct prompts drawn; requests cycle through them")
    file: str | None = Field(None, min_length=1, description="a JSONL file, one {\"prompt\": …} (or \"messages\") "
                                                             "and optionally \"max_tokens\" per line; or a "
                                                             "ShareGPT-format JSON file")
    tokenizer: str | None = Field(None, min_length=1, description="the served model's tokenizer.json (Hugging Face "
                                                                  "tokenizers; read, never downloaded): synthetic "
                                                                  "prompts of exact token lengths, and token counts "
                                                                  "where the server reports no usage")
    format: Literal["auto", "jsonl", "sharegpt"] = Field("auto", description="the file's format (auto: by its "
                                                                            "extension, .json is ShareGPT)")
    conversation: Literal["first_turn", "messages"] = Field(
        "first_turn", description="ShareGPT: the first human turn as the prompt, or the conversation up to its last "
                                  "human turn as chat messages")
    output_from: Literal["file", "profile"] = Field(
        "file", description="max_tokens from the file where it gives one (a JSONL max_tokens, a ShareGPT reply's "
                            "length in words), or from output_tokens")
    sample: Literal["in_order", "with_replacement", "without_replacement"] = Field(
        "in_order", description="a file's prompts in its order, or `count` of them drawn (seeded from load.seed)")
    ignore_eos: bool = Field(True, description="ask the server to generate max_tokens whatever the text "
                                               "(vLLM, SGLang): output lengths as asked")
    stream: bool = Field(True, description="false: whole responses (stream = false): E2E and tokens from usage "
                                           "only, no TTFT / TPOT / ITL")
    min_tokens: int | None = Field(None, ge=1, description="ask the server for at least this many tokens (vLLM's "
                                                           "min_tokens), where ignore_eos is off")
    prefix_tokens: int = Field(0, ge=0, le=100_000, description="synthetic prompts begin with a shared prefix of "
                                                                "this many words (exercises prefix caching)")
    prefix_count: int = Field(1, ge=1, le=10_000, description="how many distinct prefixes the prompts share, "
                                                              "drawn in turn")
    extra_body: dict[str, Any] | None = Field(None, description="any JSON merged into every request body, last (its "
                                              "keys win): sampling parameters, priority, a server's own fields")
    structured: Structured | None = Field(None, description="structured outputs: a JSON Schema asked of the server "
                                                            "and checked on every reply (schema_valid)")
    images: Images | None = Field(None, description="openai-chat: images each request carries (vision models)")
    audio: Audio | None = Field(None, description="openai-chat: audio clips each request carries")


class Embeddings(_Strict):
    """What an openai-embeddings endpoint is sent beside its texts (`prompts`): how many texts a request carries,
    how the vectors come back, and the dimension asked for."""

    inputs: TokenCount = Field(default_factory=lambda: TokenCount(mean=1), description="texts a request carries "
                               "(`input` as one text when 1, else a batch), fixed or drawn per request")
    encoding_format: Literal["float", "base64"] = Field("float", description="the vectors as JSON numbers, or "
                                                                             "base64 little-endian float32")
    dimensions: int | None = Field(None, ge=1, le=65_536, description="ask for vectors of this dimension "
                                   "(Matryoshka models); every reply is checked against it. Unset: not asked, and "
                                   "every vector of the run must have the first reply's dimension")


class Rerank(_Strict):
    """What a rerank endpoint is sent: a query (its `prompts`) and documents to order — drawn, or a file's — and
    which rerank API its server speaks."""

    api: Literal["cohere", "tei", "score"] = Field(
        "cohere", description="cohere: {query, documents, top_n} → results with relevance_score (vLLM's /rerank, "
                              "/v1/rerank, /v2/rerank, Infinity, Jina, Cohere); tei: TEI's /rerank {query, texts} → "
                              "[{index, score}]; score: vLLM's /score {text_1, text_2} → data with score")
    path: str | None = Field(None, pattern=r"^/[^\s]*$", description="the route (default: /v1/rerank, /rerank, "
                                                                     "/score by api)")
    documents: TokenCount = Field(default_factory=lambda: TokenCount(mean=16), description="documents a request "
                                  "carries, fixed or drawn per request (a file's line: its own)")
    document_tokens: TokenCount = Field(default_factory=lambda: TokenCount(mean=128), description="a synthetic "
                                        "document's length (words, or prompts.tokenizer's tokens)")
    top_n: int | None = Field(None, ge=1, le=10_000, description="cohere: ask for the best top_n only (every reply "
                                                                 "is checked for min(top_n, documents) results)")
    file: str | None = Field(None, min_length=1, description="a JSONL file, one {\"query\": …, \"documents\": […]} "
                             "a line (also \"passages\" or \"candidates\"; a document may be {\"text\": …}): its "
                             "queries and documents instead of drawn ones")


class ThinkTime(_Strict):
    """The user's pause between a reply's end and the next turn's send (seconds; a bare number: fixed)."""

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, data):
        return _fixed(data)

    distribution: Literal["fixed", "exponential", "lognormal", "data"] = Field(
        "fixed", description="data: each turn's own `delay` from a sessionized JSONL file")
    mean: float = Field(0, ge=0, le=86_400)
    stddev: float = Field(0, ge=0, le=86_400, description="lognormal: the standard deviation of the pause")

    @model_validator(mode="after")
    def _complete(self) -> "ThinkTime":
        if self.distribution == "lognormal" and (self.mean <= 0 or self.stddev <= 0):
            raise ValueError("a lognormal think time needs mean > 0 and stddev > 0")
        return self


class Sessions(_Strict):
    """Multi-turn sessions (conversations, agents): the arrival process starts sessions; each runs its turns one
    after another, turn k+1 due at turn k's end + a think time, carrying the conversation so far."""

    turns: TokenCount = Field(default_factory=lambda: TokenCount(mean=4), description="turns a session has "
                              "(synthetic sessions; a file's sessions have their own), fixed or drawn")
    think_s: ThinkTime = Field(default_factory=ThinkTime, description="pause before each later turn")
    user_tokens: TokenCount | None = Field(None, description="synthetic sessions: each later turn's new user text "
                                                             "(default: prompts.input_tokens)")
    on_error: Literal["end", "continue"] = Field("end", description="a failed turn ends its session, or the next "
                                                                    "turn goes on without its reply")
    history: Literal["actual", "recorded"] = Field(
        "actual", description="actual: the server's own replies (the text it streamed) go into the next turn; "
                              "recorded: the file's replies (deterministic prompts; synthetic: a fixed text of the "
                              "turn's max_tokens words)")
    context_tokens: int | None = Field(None, ge=1, le=10_000_000, description="the longest prompt a turn may send "
                                       "(words, or prompts.tokenizer's tokens); default: no limit")
    on_context_limit: Literal["end", "truncate"] = Field(
        "end", description="a next prompt over context_tokens ends the session, or drops the oldest turns")
    tool_result_tokens: int = Field(0, ge=0, le=1_000_000, description="agents: each later turn carries the "
                                    "previous turn's tool call (if any) and a tool result of this many words")
    server_state: bool = Field(False, description="openai-responses: the server keeps the conversation (store: true); "
                                                  "each later turn sends only its new input and names the previous "
                                                  "reply (previous_response_id)")

    @model_validator(mode="after")
    def _server_state(self) -> "Sessions":
        if self.server_state and (self.history != "actual" or self.on_context_limit != "end"):
            raise ValueError("server_state: the server keeps the actual conversation: history must be \"actual\" "
                             "and on_context_limit \"end\" (it cannot drop the oldest turns)")
        return self


class ModelShare(_Strict):
    """One model of an endpoint's mix (a LoRA adapter on one server, a model behind a gateway) and its weight."""

    name: str = Field(min_length=1, description="the model (or adapter) name the requests carry")
    weight: float = Field(1.0, gt=0, description="its share of the endpoint's requests, relative to the others'")


STRUCTURED = names_where(lambda a: a.structured)  # a JSON Schema's field in the body
MIXABLE = names_where(lambda a: a.model_in_body)  # the model in the body


class Cancel(_Strict):
    """A share of a streamed endpoint's requests abandoned by the client, its connection closed as a user's browser
    closes it: after a drawn time from the intended send, after the first token, or after N tokens. Which requests,
    and each one's time or tokens, are drawn from load.seed and the request's place in the arrival process (the same
    requests in every run of the seed)."""

    share: float = Field(gt=0, le=1, description="the share of requests abandoned (a session's turns: each drawn)")
    after: Literal["time", "first_token", "tokens"] = Field(
        description="time: `after_ms` from the intended send (before or after the first token); first_token: the "
                    "moment the first token is read; tokens: once `after_tokens` output tokens were read")
    after_ms: TokenCount | None = Field(None, description="after = \"time\": ms from the intended send, fixed or "
                                                          "drawn (uniform, normal, lognormal; min / max)")
    after_tokens: TokenCount | None = Field(None, description="after = \"tokens\": output tokens read before the "
                                                              "stream is closed, fixed or drawn")

    @model_validator(mode="after")
    def _complete(self) -> "Cancel":
        if (self.after == "time") != (self.after_ms is not None):
            raise ValueError("after_ms goes with after = \"time\" (and it needs it)")
        if (self.after == "tokens") != (self.after_tokens is not None):
            raise ValueError("after_tokens goes with after = \"tokens\" (and it needs it)")
        return self


class Endpoint(_Strict):
    """One target: a model behind a KServe v2 endpoint, or an OpenAI-compatible generative one."""

    name: str = Field(pattern=NAME)
    url: str = Field(description="http(s)://host:port, grpc(s)://host:port, or 'embedded' / 'triton' (tailrace run "
                                 "starts the embedded endpoint / a local Triton through PyTriton)")
    protocol: Literal["kserve-http", "kserve-grpc", "inprocess", "openai-chat", "openai-completions",
                      "triton-generate", "kserve-grpc-stream", "openai-embeddings", "rerank", "anthropic-messages",
                      "openai-responses"] = Field(
        description="inprocess: the model's ONNX file run inside the worker (url = 'inprocess'), a no-network "
                    "baseline; openai-chat / openai-completions: streamed /v1/chat/completions, /v1/completions; "
                    "triton-generate: Triton's /v2/models/{model}/generate_stream; kserve-grpc-stream: "
                    "ModelStreamInfer on a decoupled model; openai-embeddings: /v1/embeddings (vLLM, TEI, Infinity, "
                    "llama.cpp, Triton's OpenAI frontend); rerank: a query and documents scored (vLLM, TEI, "
                    "Infinity, Cohere-style); anthropic-messages: streamed /v1/messages (Anthropic's API: vLLM, "
                    "gateways); openai-responses: streamed /v1/responses")
    model: str = Field(description="the served model's name; or, on a JSON-bodied generative endpoint, a weighted "
                                   "list — model = [{ name = \"base\", weight = 3 }, { name = \"lora-a\" }] — "
                                   "drawn per request (or per session: model_draw)")
    models: list[ModelShare] = Field(default_factory=list, description="the mix, when `model` is a list (set from it)")
    model_draw: Literal["request", "session"] = Field("request", description="a model mix: drawn for each request, "
                                                                             "or once per session (all its turns)")
    weight: float = Field(1.0, ge=0, description="share of the arrivals among endpoints (and pipelines); 0: the "
                                                 "endpoint is sent only a pipeline's stages")
    timeout_ms: float = Field(5000, gt=0, description="a request's whole time; default 5 s, or for a generative "
                                                      "endpoint 120 s (a long stream is bounded by "
                                                      "ttft_timeout_ms and stall_timeout_ms instead)")
    auth_header: str | None = Field(None, description="header / metadata key to send, e.g. Authorization")
    auth_env: str | None = Field(None, description="environment variable holding its value (never logged)")
    auth_file: str | None = Field(None, min_length=1, description="a file holding its value, re-read when it changes "
                                                                  "(a mounted Kubernetes Secret; never logged)")
    tls: Tls | None = Field(None, description="https:// / grpcs:// only: CA, client certificate, server name")
    stats_url: str | None = Field(None, description="http://host:port of the server's statistics extension "
                                                    "(default: url for kserve-http; a Triton's HTTP port for gRPC)")
    metrics_url: str | None = Field(None, description="Prometheus metrics, e.g. http://triton:8002/metrics")
    model_version: str = Field("", description="the model version to ask for (default: the server's choice)")
    data: str | None = Field(None, description="'random', 'zero', or a data file: perf_analyzer input-data JSON, "
                                               ".npz, .jsonl, or a directory (one file per sample, one BYTES input); "
                                               "default: inputs.dataset, else 'random'")
    shapes: dict[str, list[Annotated[int, Field(ge=1)]]] = Field(
        default_factory=dict, description="an input's shape without the batch dimension, fixing dynamic sizes "
                                          "(like perf_analyzer --shape)")
    ranges: dict[str, Annotated[list[float], Field(min_length=2, max_length=2)]] = Field(
        default_factory=dict, description="random data: [low, high) per input")
    batch_size: int | None = Field(None, ge=1, le=1024, description="rows per request when the model has a batch "
                                                                  "dimension (default inputs.batch_size)")
    outputs: list[str] | None = Field(None, min_length=1, description="outputs to ask for (default: all the model "
                                                                      "declares)")
    binary: bool | Literal["auto"] = Field("auto", description="HTTP binary tensor extension: 'auto' (tensors over "
                                                               "1 kB and every BYTES tensor), true, false")
    check: Check | None = None
    inputs: list[DeclaredTensor] | None = Field(None, min_length=1, description="the model's inputs, for servers "
                                                                                "whose metadata says none")
    prompts: Prompts | None = Field(None, description="generative endpoints: what to send (default: 128 words in, "
                                                      "64 tokens out)")
    ttft_timeout_ms: float | None = Field(None, gt=0, description="generative endpoints: a request with no first "
                                                                  "token this long after it was sent fails")
    stall_timeout_ms: float | None = Field(None, gt=0, description="generative endpoints: a stream with no event "
                                                                   "for this long after its first token fails "
                                                                   "(stalled)")
    sessions: Sessions | None = Field(None, description="generative endpoints: multi-turn sessions (arrivals start "
                                                        "sessions)")
    embeddings: Embeddings | None = Field(None, description="openai-embeddings: texts per request, the vectors' "
                                                            "encoding and dimension (texts: `prompts`)")
    rerank: Rerank | None = Field(None, description="rerank: the API, the documents per request, top_n (the query: "
                                                    "`prompts`)")
    cancel: Cancel | None = Field(None, description="streamed generative endpoints: a share of requests abandoned by "
                                                    "the client (recorded as cancelled, never ok, never an error)")
    token_count_output: str | None = Field(None, min_length=1, description="triton-generate: the output field "
                                           "saying how many tokens an event carries (the vLLM backend's "
                                           "num_output_tokens); default: one event = one token")

    @model_validator(mode="before")
    @classmethod
    def _model_mix(cls, data):
        """`model` as a weighted list: the mix in `models`, `model` its first (what /v1/models must list, probe's)."""
        if isinstance(data, dict) and isinstance(data.get("model"), list):
            mix = data["model"]
            if not mix:
                raise ValueError("model: an empty list (name one model, or several with weights)")
            first = mix[0].get("name") if isinstance(mix[0], dict) else None
            data = {**data, "models": list(mix), "model": first if isinstance(first, str) else ""}
        return data

    @model_validator(mode="before")
    @classmethod
    def _stream_defaults(cls, data):
        """A generative endpoint's defaults fit streams: no 5 s total (a 500-token stream at 9 ms a token takes
        longer), a 30 s stall timeout between events."""
        if isinstance(data, dict) and data.get("protocol") in GENERATIVE:
            data = {"timeout_ms": 120_000.0, "stall_timeout_ms": 30_000.0, **data}
        return data

    @field_validator("ranges")
    @classmethod
    def _ranges(cls, v: dict[str, list[float]]) -> dict[str, list[float]]:
        for name, (low, high) in v.items():
            if not low < high:
                raise ValueError(f"{name}: [low, high) needs low < high, got [{low:g}, {high:g}]")
        return v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v not in (*STARTED_BY_RUN, INPROCESS) and not v.startswith(("http://", "https://", "grpc://", "grpcs://")):
            raise ValueError("must be 'embedded', 'triton', 'inprocess' or start with http://, https://, grpc:// or "
                             "grpcs://")
        return v if v in (*STARTED_BY_RUN, INPROCESS) else check_url(v, ("http", "https", "grpc", "grpcs"))

    @field_validator("stats_url", "metrics_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v if v is None else check_url(v, ("http", "https"))

    @model_validator(mode="after")
    def _auth(self) -> "Endpoint":
        if (self.auth_header is None) != (self.auth_env is None and self.auth_file is None):
            raise ValueError("auth_header goes with auth_env or auth_file")
        if self.auth_env is not None and self.auth_file is not None:
            raise ValueError("auth_env and auth_file: give one (where the value is read from)")
        if (self.protocol == "inprocess") != (self.url == INPROCESS):
            raise ValueError("protocol 'inprocess' and url 'inprocess' go together")
        api = serving_api(self.protocol)
        scheme = urlsplit(self.url).scheme
        wanted = " or ".join(s + "://" for s in api.schemes)
        if api.schemes and scheme and scheme not in api.schemes:
            raise ValueError(f"url: protocol {self.protocol!r} needs a {wanted} URL, not {scheme}://")
        if self.tls is not None and scheme not in TLS_SCHEMES:
            raise ValueError(f"tls: needs an https:// or grpcs:// url, not {self.url!r}")
        if (api.generative or api.pooling) and not scheme and self.url not in api.started:
            raise ValueError(f"url: protocol {self.protocol!r} needs a URL ({wanted}), or "
                             f"{' or '.join(repr(s) for s in api.started)} (the generative models tiny_lm, "
                             f"synthetic_lm), not {self.url!r}")
        if api.pooling and (self.ttft_timeout_ms is not None or self.stall_timeout_ms is not None
                            or self.sessions is not None):
            raise ValueError(f"ttft_timeout_ms, stall_timeout_ms and sessions are for streamed endpoints: a "
                             f"{self.protocol} reply comes whole")
        if self.embeddings is not None and self.protocol != "openai-embeddings":
            raise ValueError("embeddings is for openai-embeddings endpoints")
        if self.rerank is not None and self.protocol != "rerank":
            raise ValueError("rerank is for rerank endpoints")
        if not api.generative and not api.pooling and (
                self.prompts is not None or self.ttft_timeout_ms is not None
                or self.stall_timeout_ms is not None or self.sessions is not None):
            raise ValueError(f"prompts, sessions, ttft_timeout_ms and stall_timeout_ms are for generative endpoints "
                             f"({', '.join(GENERATIVE)})")
        self._check_traits(api)
        return self

    def _check_traits(self, api: ServingApi) -> None:
        """Each option a serving API may not take, refused naming the APIs that take it (contract/apis/registry.py)."""
        prompts = self.prompts
        taken = (
            (self.sessions is not None and self.sessions.server_state, "server_state", "sessions.server_state",
             "previous_response_id"),
            (self.sessions is not None, "sessions", "sessions", "a turn carries the conversation so far"),
            (prompts is not None and prompts.images is not None, "images", "prompts.images",
             "content parts of a message"),
            (prompts is not None and prompts.audio is not None, "audio", "prompts.audio",
             "OpenAI's input_audio content parts"),
            (prompts is not None and prompts.structured is not None, "structured", "prompts.structured",
             "response_format / text.format"),
            (prompts is not None and prompts.extra_body is not None, "json_body", "prompts.extra_body",
             "fields added to a JSON body"),
            (bool(self.models), "model_in_body", "model (a weighted list)", "the model named in the JSON body"),
            (self.cancel is not None, "cancel", "cancel", "a streamed HTTP reply abandoned part-way"),
            (self.token_count_output is not None, "token_count_output", "token_count_output",
             "a tensor reply's token count; OpenAI streams report usage"),
        )
        for asked, trait, option, why in taken:
            if asked and not getattr(api, trait):
                takers = names_where(lambda a, t=trait: getattr(a, t))
                raise ValueError(f"{option}: for {listed(takers)} endpoints ({why}), not {self.protocol}")
        if self.models:
            names = [m.name for m in self.models]
            if len(set(names)) < len(names):
                raise ValueError(f"model: {sorted({n for n in names if names.count(n) > 1})[0]!r} is listed twice")
        if self.model_draw == "session" and (not self.models or self.sessions is None):
            raise ValueError("model_draw = \"session\": for an endpoint with a model list and sessions")
        if self.cancel is not None and prompts is not None and not prompts.stream:
            raise ValueError(f"cancel: for streamed HTTP generative endpoints ({listed(names_where(lambda a: a.cancel))}"
                             " with prompts.stream = true), not a whole reply")
        return self

    @property
    def api(self) -> ServingApi:
        """Its serving API's traits (contract/apis/registry.py)."""
        return serving_api(self.protocol)

    @property
    def generative(self) -> bool:
        """Streams tokens (TTFT, TPOT, ITL)."""
        return self.api.generative

    @property
    def pooling(self) -> bool:
        """Texts in, vectors out (embeddings): no tensors to resolve, no tokens streamed."""
        return self.api.pooling

    @property
    def uses_tls(self) -> bool:
        return urlsplit(self.url).scheme in TLS_SCHEMES


class Region(_Strict):
    """A load-generator region: its share of the total rate and, for local emulation, its network and clock."""

    name: str = Field(pattern=NAME)
    share: float = Field(gt=0, le=1)
    delay_ms: float = Field(0, ge=0, le=5000, description="emulated one-way delay each direction")
    jitter_ms: float = Field(0, ge=0, le=1000)
    clock_skew_ms: float = Field(0, ge=-600_000, le=600_000, description="emulated worker clock error")
    workers: int = Field(1, ge=1, le=16)
    cluster: str | None = Field(None, pattern=NAME, description="deployments: the cluster this region's generators "
                                                                "run in (default: the region's name)")
    node_selector: dict[str, str] | None = Field(
        None, description="deployments: labels of the nodes this region's generators run on (default: "
                          "topology.kubernetes.io/region = the region's name)")


class Phase(_Strict):
    """A change of the rate, `at_s` seconds into the measured window: a step to `rate`, a ramp to `rate`
    over `duration_s`, or a spike of the current rate × `factor` for `duration_s`."""

    at_s: float = Field(ge=0)
    kind: Literal["step", "ramp", "spike"] = "step"
    rate: float | None = Field(None, gt=0, le=100_000)
    factor: float | None = Field(None, gt=0, le=1000, description="spike: rate multiplier")
    duration_s: float | None = Field(None, gt=0, description="ramp / spike length")

    @model_validator(mode="after")
    def _complete(self) -> "Phase":
        if self.kind in ("step", "ramp") and self.rate is None:
            raise ValueError(f"a {self.kind} phase needs rate")
        if self.kind in ("ramp", "spike") and self.duration_s is None:
            raise ValueError(f"a {self.kind} phase needs duration_s")
        if self.kind == "spike" and self.factor is None:
            raise ValueError("a spike phase needs factor")
        if self.kind == "step" and (self.factor is not None or self.duration_s is not None):
            raise ValueError("a step phase takes only at_s and rate")
        return self


class Trace(_Strict):
    """A file of arrival instants to replay (`load.arrivals.process = "trace"`)."""

    file: str = Field(min_length=1, description="the trace (relative paths: from where the worker runs)")
    format: Literal["auto", "csv", "jsonl", "azure", "mooncake"] = Field(
        "auto", description="csv / jsonl: `timestamp` (s) and optionally endpoint, region, input_tokens, "
                            "output_tokens, prompt_id; azure: the Azure LLM inference trace CSV (TIMESTAMP, "
                            "ContextTokens, GeneratedTokens); mooncake: JSONL (timestamp ms, input_length, "
                            "output_length, hash_ids); auto: by the header / first line")
    time_scale: float = Field(1.0, gt=0, le=1000, description="2 = twice as fast")
    start_s: float = Field(0, ge=0, description="skip the trace's first seconds (its own time)")
    window_s: float | None = Field(None, gt=0, description="replay this much of the trace (its own time)")
    loop: bool = Field(False, description="replay the window again until duration_s ends")


class Arrivals(_Strict):
    """The arrival process of the server scenario: one global process, drawn in advance from load.seed and split
    across regions by share (each arrival of the one sequence assigned with a seeded draw)."""

    process: Literal["poisson", "gamma", "onoff", "constant", "trace"] = Field(
        "poisson", description="poisson; gamma (renewal, gaps' coefficient of variation `cv`); onoff (a two-state "
                               "Markov-modulated Poisson process); constant (evenly spaced); trace (replay a file)")
    cv: float | None = Field(None, gt=0, le=20, description="gamma: the gaps' coefficient of variation (1 = Poisson, "
                                                           "> 1 burstier, < 1 smoother)")
    on_rate: float | None = Field(None, gt=0, le=100_000, description="onoff: requests/s while on")
    off_rate: float | None = Field(None, ge=0, le=100_000, description="onoff: requests/s while off")
    on_s: float | None = Field(None, gt=0, le=86_400, description="onoff: mean time on (exponential)")
    off_s: float | None = Field(None, gt=0, le=86_400, description="onoff: mean time off (exponential)")
    trace: Trace | None = None

    @model_validator(mode="after")
    def _complete(self) -> "Arrivals":
        need = {"gamma": ("cv",), "onoff": ("on_rate", "off_rate", "on_s", "off_s"), "trace": ("trace",)}
        missing = [f for f in need.get(self.process, ()) if getattr(self, f) is None]
        if missing:
            raise ValueError(f"the {self.process} process needs {', '.join(missing)}")
        extra = [f for f in ("cv", "on_rate", "off_rate", "on_s", "off_s", "trace")
                 if getattr(self, f) is not None and f not in need.get(self.process, ())]
        if extra:
            raise ValueError(f"{', '.join(extra)}: not a setting of the {self.process} process")
        return self

    @property
    def mean_rate(self) -> float | None:
        """onoff: its long-run rate (the states' rates weighted by their mean sojourns)."""
        on_rate, off_rate, on_s, off_s = self.on_rate, self.off_rate, self.on_s, self.off_s
        if self.process != "onoff" or on_rate is None or off_rate is None or on_s is None or off_s is None:
            return None
        return (on_rate * on_s + off_rate * off_s) / (on_s + off_s)


class Load(_Strict):
    """What traffic to send, after MLPerf Inference's scenarios."""

    scenario: Literal["server", "single-stream", "multi-stream", "offline"] = Field(
        "server", description="server: Poisson at `rate`; single-stream: one request at a time per region; "
                              "multi-stream: a query of samples_per_query every interval_ms per region; "
                              "offline: batches of offline_batch as fast as the endpoint takes them")
    rate: float | None = Field(None, gt=0, le=100_000, description="server: total arrival rate, requests/s")
    duration_s: float = Field(gt=0, le=86_400)
    warmup_s: float = Field(0, ge=0, le=3600)
    seed: int = Field(0, ge=0, lt=2**63, description="the arrival process's seed (0 ≤ seed < 2^63)")
    phases: list[Phase] = Field(default_factory=list)
    arrivals: Arrivals = Field(default_factory=Arrivals, description="server: the arrival process (default Poisson)")
    samples_per_query: int = Field(8, ge=1, le=1024, description="multi-stream: samples (batch) per query")
    interval_ms: float = Field(50, gt=0, le=60_000, description="multi-stream: query interval")
    offline_batch: int = Field(256, ge=1, le=4096, description="offline: samples per request")
    offline_concurrency: int = Field(2, ge=1, le=64, description="offline: requests in flight per worker")

    @field_validator("phases")
    @classmethod
    def _ordered(cls, v: list[Phase]) -> list[Phase]:
        if any(b.at_s <= a.at_s for a, b in zip(v, v[1:])):
            raise ValueError("phases must have strictly increasing at_s")
        for a, b in zip(v, v[1:]):
            if a.duration_s is not None and a.at_s + a.duration_s > b.at_s:
                raise ValueError(f"the {a.kind} at {a.at_s:g} s lasts past the next phase at {b.at_s:g} s")
        return v

    @model_validator(mode="after")
    def _scenario(self) -> "Load":
        process = self.arrivals.process
        if self.scenario != "server" and process != "poisson":
            raise ValueError(f"arrivals: only the server scenario has an arrival process, not {self.scenario}")
        if process in ("onoff", "trace"):
            if self.rate is not None or self.phases:
                raise ValueError(f"rate, phases: the {process} process sets its own rate "
                                 f"({'on_rate / off_rate' if process == 'onoff' else 'the trace'})")
        elif self.scenario == "server" and self.rate is None:
            raise ValueError("rate: the server scenario needs a rate (requests/s)")
        if self.scenario != "server" and self.phases:
            raise ValueError(f"phases: only the server scenario has phases, not {self.scenario}")
        if any(p.at_s >= self.duration_s for p in self.phases):
            raise ValueError("phases: every phase must start before duration_s")
        return self


class Clock(_Strict):
    servers: list[str] = Field(default_factory=lambda: [EMBEDDED],
                               description="host:port NTP servers, 'embedded' (tailrace run's SNTP reference) "
                                           "or 'master' (tailrace master's, for workers on other hosts)")
    interval_s: float = Field(5, gt=0, le=3600)
    packets: int = Field(4, ge=1, le=16, description="packets per sample; the minimum-delay one is kept")


class Inputs(_Strict):
    """How samples are chosen and bounded, for every endpoint."""

    dataset: str | None = Field(None, description="older profiles: a data file relative to embedded.models_dir, "
                                                  "the default of every endpoint's `data`")
    selection: Literal["random", "sequential"] = "random"
    batch_size: int = Field(1, ge=1, le=1024, description="default of every endpoint's batch_size")
    max_samples: int = Field(1024, ge=1, le=1_000_000, description="samples read from a data file (or made up "
                                                                   "for random / zero), cycled through")
    max_encoded_mb: float = Field(64, gt=0, description="bound on one endpoint's pre-encoded requests per worker; "
                                                         "fewer samples are kept when they would exceed it")


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

    @model_validator(mode="after")
    def _prompt(self) -> "Pipeline":
        if "{query}" not in self.prompt:
            raise ValueError("prompt: must hold {query} (and may hold {passages})")
        return self


TOKEN_METRICS = ("ttft", "tpot", "itl", "e2e")  # generative endpoints' (docs/METHODS.md, "Streams")
PIPELINE_METRICS = ("pipeline_e2e", "pipeline_ttft")


class Slo(_Strict):
    metric: Literal["latency", "error_rate", "ttft", "tpot", "itl", "e2e", "pipeline_e2e", "pipeline_ttft"] = Field(
        description="latency (from the intended send), error_rate, a streamed request's ttft, tpot, itl, e2e, or a "
                    "pipeline's end-to-end time or time to its answer's first token (from its arrival's intended "
                    "send)")
    percentile: float | None = Field(None, gt=0, lt=100)
    threshold_ms: float | None = Field(None, gt=0)
    threshold: float | None = Field(None, ge=0, le=1, description="error-rate bound (fraction)")
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
        if self.metric != "error_rate" and (self.percentile is None or self.threshold_ms is None):
            raise ValueError(f"a {self.metric} SLO needs percentile and threshold_ms")
        if self.metric == "error_rate" and self.threshold is None:
            raise ValueError("an error_rate SLO needs threshold")
        return self


class Embedded(_Strict):
    models_dir: str = "build/models"
    slots: dict[str, int] = Field(default_factory=dict)
    queue_depth: dict[str, int] = Field(default_factory=dict)
    max_batch: dict[str, int] = Field(default_factory=dict)
    mm1_mean_ms: float | None = Field(None, gt=0)
    fault_injection: bool = False
    process_per_model: bool = Field(False, description="one endpoint process per model (memory per variant)")
    cpus: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, min_length=1, description="pin the endpoint process(es) to these CPUs (keep them off the generators')")
    max_num_seqs: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="generative model → most sequences in its running batch")
    max_num_batched_tokens: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="generative model → token budget of one step")
    max_waiting: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="generative model → waiting requests before new ones are refused (429)")
    max_model_len: dict[str, Annotated[int, Field(ge=1, le=10_000_000)]] = Field(
        default_factory=dict, description="generative model → the longest prompt + max_tokens it takes (default 4096)")
    kv_cache_tokens: dict[str, Annotated[int, Field(ge=16, le=1_000_000_000)]] = Field(
        default_factory=dict, description="generative model → its prefix cache's budget in tokens (default 262144; "
                                          "least recently used blocks evicted beyond it)")
    prefix_caching: dict[str, bool] = Field(
        default_factory=dict, description="generative model → automatic prefix caching (default on, as vLLM's; "
                                          "tiny_lm does not cache)")


class TritonLocal(_Strict):
    """A local Triton Inference Server (PyTriton, CPU) that `tailrace run` starts for endpoints with url 'triton'."""

    python: str | None = Field(None, description="interpreter of the PyTriton virtualenv (default .venv-triton)")
    models_dir: str = "build/models"
    max_batch: int = Field(16, ge=1, le=1024, description="max_batch_size of every model")
    dynamic_batching: bool = True
    queue_delay_us: int = Field(0, ge=0, le=1_000_000, description="dynamic batcher's max_queue_delay_microseconds")
    instances: int = Field(1, ge=1, le=16, description="model instances (execution slots) per model")


class Capacity(_Strict):
    """`tailrace capacity`: exponential growth, then bisection over short Poisson trials."""

    start_rate: float = Field(50, gt=0, le=100_000)
    growth: float = Field(2.0, gt=1, le=10)
    tolerance: float = Field(0.05, gt=0, lt=1, description="stop when the bracket is within this fraction")
    budget_s: float = Field(900, gt=0, description="total time for the search")
    min_trial_s: float = Field(5, gt=0)
    max_trial_s: float = Field(120, gt=0)
    samples_margin: float = Field(3, ge=1, description="× the samples the SLO percentile needs, per trial group")
    trial_warmup_s: float = Field(1, ge=0)
    peak_rate: float | None = Field(None, gt=0, description="expected production peak, for the recommendation")
    headroom: float = Field(1.5, ge=1)
    max_utilization: float = Field(0.7, gt=0, le=1)


class DecisionConstraints(_Strict):
    p95_ms_max: float | None = Field(None, gt=0)
    accuracy_min: float | None = Field(None, ge=0, le=1)
    memory_mb_max: float | None = Field(None, gt=0)
    capacity_rps_min: float | None = Field(None, gt=0)
    ttft_p95_ms_max: float | None = Field(None, gt=0, description="generative variants: TTFT p95 ≤")
    tpot_p95_ms_max: float | None = Field(None, gt=0, description="generative variants: TPOT p95 ≤")
    output_tokens_per_s_min: float | None = Field(None, gt=0, description="generative variants: output tokens/s ≥")
    energy_budget_mj: float | None = Field(None, gt=0, description="energy per request ≤ (mJ; from [[monitors]]: "
                                                                   "measured, or estimated where no variant is)")


DECISION_METRICS = Literal["p95_ms", "accuracy", "memory_mb", "capacity_rps", "ttft_p95_ms", "tpot_p95_ms",
                           "output_tokens_per_s", "energy_mj"]


class Decision(_Strict):
    """Model-variant decision: which endpoints are variants, the baseline, weights and hard constraints."""

    variants: list[str] = Field(default_factory=list, description="endpoint names (default: every endpoint "
                                                                    "except the baseline)")
    baseline: str | None = Field(None, description="an 'inprocess' endpoint: the model's own cost, no serving")
    weights: dict[DECISION_METRICS, float] | None = Field(
        None, description="default: p95_ms 1, accuracy 1, memory_mb 0.5, capacity_rps 0.5; for generative variants "
                          "ttft_p95_ms 1, tpot_p95_ms 1, output_tokens_per_s 0.5, capacity_rps 0.5, memory_mb 0.25 "
                          "(their p95_ms is E2E); energy_mj 0.5 where [[monitors]] say it")
    constraints: DecisionConstraints = Field(default_factory=DecisionConstraints)
    capacity_rps: dict[str, float] = Field(default_factory=dict, description="measured capacities (e.g. from "
                                           "`tailrace capacity`) per endpoint; otherwise slots / mean service time")

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: dict | None) -> dict | None:
        if v is None:
            return v
        if any(w < 0 for w in v.values()) or not any(w > 0 for w in v.values()):
            raise ValueError("weights must be >= 0 and at least one > 0")
        return v


class ColdStart(_Strict):
    first_k: int = Field(20, ge=1, le=100_000, description="requests per endpoint compared with steady state")


class Monitor(_Strict):
    """A Prometheus endpoint of what the hardware did — NVIDIA's DCGM exporter, the node exporter (CPU, memory, RAPL
    joules), Kepler, Triton's or vLLM's /metrics — scraped by the master through the run, each scrape stamped on its
    clock."""

    name: str = Field(pattern=NAME, description="the source's name in the report (a host, a GPU node)")
    url: str = Field(description="its metrics, e.g. http://gpu-node-1:9400/metrics (DCGM), http://host:9100/metrics; "
                                 "'embedded': the embedded server tailrace run starts (its process's CPU and memory, "
                                 "each model's CPU time, RAPL and NVML where the host has them); 'triton': the Triton "
                                 "it starts (its CPU and GPU metrics)")
    interval_s: float = Field(1.0, ge=0.1, le=600, description="seconds between scrapes")
    timeout_s: float = Field(1.0, gt=0, le=30, description="a scrape that takes longer is missed (and said)")
    endpoints: list[str] = Field(default_factory=list, description="the endpoints whose server it watches (default: "
                                 "every endpoint): its energy per request counts their requests; one endpoint alone "
                                 "gives that endpoint's energy per request")
    watts_per_core: float | None = Field(None, gt=0, le=1000, description="where the source has no energy counter: "
                                         "an estimate, its processes' CPU-seconds × these watts (labelled as an "
                                         "estimate, never added to measured joules)")

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        return v if v in (EMBEDDED, TRITON) else check_url(v, ("http", "https"))


class OtelReceive(_Strict):
    """An OTLP receiver the master opens for the run: servers send it their spans (vLLM's --otlp-traces-endpoint,
    Triton's trace mode), which the report joins to the requests."""

    host: str = Field("127.0.0.1", description="the address it binds (a server on another host: this host's)")
    grpc_port: int = Field(4317, ge=0, le=65535, description="OTLP over gRPC (vLLM's default protocol); 0: any")
    http_port: int = Field(4318, ge=0, le=65535, description="OTLP over HTTP, POST /v1/traces; 0: any")
    linger_s: float = Field(6.0, ge=0, le=600, description="kept open this long after the last response, for the "
                                                          "spans servers batch (the SDK's default: every 5 s)")


class OtelExport(_Strict):
    """Where the run's requests go as spans once it ends (as `tailrace export otlp` sends them)."""

    endpoint: str = Field(description="an OTLP receiver: http://collector:4318 (HTTP) or http://collector:4317 (gRPC)")
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    sample: str = Field("all", description="all, or any of slowest:N, errors, share:F joined by commas")
    headers: dict[str, str] = Field(default_factory=dict, description="sent with every batch (no secrets: the "
                                                                     "plan records the profile)")

    @field_validator("endpoint")
    @classmethod
    def _url(cls, v: str) -> str:
        return check_url(v, ("http", "https"))

    @field_validator("sample")
    @classmethod
    def _sample(cls, v: str) -> str:
        Sample.parse(v)  # a SampleError is a ValueError: the field named, the part that is wrong said
        return v


class Otel(_Strict):
    """OpenTelemetry: receive the servers' spans during the run; export the requests as spans after it."""

    receive: OtelReceive | None = None
    export: OtelExport | None = None


class ServerStats(_Strict):
    interval_s: float = Field(5, gt=0, le=3600, description="periodic statistics + metrics snapshots")


class Generator(_Strict):
    send_lag_p99_ms: float = Field(5, gt=0, description="saturation threshold per window")
    stall_max_ms: float = Field(250, gt=0, description="a lagging window next to clean ones is a transient host "
                                                       "stall (a warning) unless its sends were late this long "
                                                       "on end")
    behind_max_s: float = Field(2, gt=0, description="a generator behind schedule at the end of consecutive windows "
                                                      "spanning this long did not send the planned arrivals (INVALID)")
    window_s: float = Field(1, gt=0)
    max_in_flight: int = Field(5000, ge=1)
    chunk_rows: int = Field(5000, ge=1)
    chunk_seconds: float = Field(0.25, gt=0, le=5, description="close a chunk at least this often (small chunks "
                                                                 "keep each write, done on the sending loop, short)")
    spin_ms: float = Field(1.5, ge=0, le=5, description="yield-spin the last ms before each send: gevent timers "
                                                         "wake ~1 ms late (precision vs CPU)")
    send_path: Literal["inline", "greenlet"] = Field(
        "inline", description="open-loop plain-HTTP KServe requests: driven by the issue loop itself, each record "
                              "written while no send is due (inline), or a greenlet a request (greenlet)")
    ship_dir: str | None = Field(None, description="where remote workers write chunks (a shared directory)")
    cpus: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, min_length=1, description="pin the local Locust master, workers and delay proxies to these CPUs")
    master_timeout_s: float = Field(30, ge=3, le=3600, description="a worker keeps its schedule through a silent "
                                                                   "master this long (and the master a silent worker) "
                                                                   "before it stops: robustness against how long "
                                                                   "orphaned load may last")


class Profile(_Strict):
    """A scenario profile."""

    name: str = Field(pattern=NAME)
    description: str = ""
    output_dir: str = "runs"
    endpoints: list[Endpoint] = Field(min_length=1)
    regions: list[Region] = Field(min_length=1)
    load: Load
    clock: Clock = Field(default_factory=Clock)
    inputs: Inputs = Field(default_factory=Inputs)
    slos: list[Slo] = Field(default_factory=list)
    embedded: Embedded = Field(default_factory=Embedded)
    triton: TritonLocal = Field(default_factory=TritonLocal)
    server_stats: ServerStats = Field(default_factory=ServerStats)
    otel: Otel = Field(default_factory=Otel, description="OpenTelemetry: the servers' spans received, the requests "
                                                        "exported as spans")
    monitors: list[Monitor] = Field(default_factory=list, description="what the hardware did: exporters scraped "
                                    "through the run (utilization, memory, power, energy)")
    cold_start: ColdStart = Field(default_factory=ColdStart)
    capacity: Capacity = Field(default_factory=Capacity)
    decision: Decision | None = None
    pipelines: list[Pipeline] = Field(default_factory=list, description="chains of stages over the endpoints "
                                      "(RAG: embed → rerank → generate), started by the arrival process")
    generator: Generator = Field(default_factory=Generator)
    overrides: list[str] = Field(default_factory=list, description="set by tailrace from --set / --rate / --duration "
                                                                   "and TAILRACE_SET_* (contract/overrides.py), never "
                                                                   "in a profile file: the manifest records them")

    @model_validator(mode="after")
    def _consistent(self) -> "Profile":
        total = sum(r.share for r in self.regions)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"regions: shares must add up to 1, they add up to {total:g}")
        for field_name, items in (("endpoints", self.endpoints), ("regions", self.regions),
                                  ("monitors", self.monitors)):
            names = [i.name for i in items]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{field_name}: duplicate name(s) {', '.join(dupes)}")
        if self.load.scenario == "single-stream":
            crowded = [r.name for r in self.regions if r.workers != 1]
            if crowded:
                raise ValueError(f"regions: single-stream runs one stream per region; set workers = 1 for "
                                 f"{', '.join(crowded)}")
        endpoint_names = {e.name for e in self.endpoints}
        if self.decision is not None:
            for i, v in enumerate(self.decision.variants):
                if v not in endpoint_names:
                    raise ValueError(f"decision.variants[{i}]: no endpoint named {v!r}")
            for v in self.decision.capacity_rps:
                if v not in endpoint_names:
                    raise ValueError(f"decision.capacity_rps: no endpoint named {v!r}")
            b = self.decision.baseline
            if b is not None and next((e.protocol for e in self.endpoints if e.name == b), None) != "inprocess":
                raise ValueError(f"decision.baseline: {b!r} must name an endpoint with protocol 'inprocess'")
        self._check_pipelines()
        if any(m.url == EMBEDDED for m in self.monitors) and not any(e.url == EMBEDDED for e in self.endpoints):
            raise ValueError("monitors: url 'embedded' is the embedded server's, and no endpoint has url 'embedded'")
        if any(m.url == TRITON for m in self.monitors) and not any(e.url == TRITON for e in self.endpoints):
            raise ValueError("monitors: url 'triton' is the started Triton's, and no endpoint has url 'triton'")
        for i, m in enumerate(self.monitors):
            unknown = [e for e in m.endpoints if e not in endpoint_names]
            if unknown:
                raise ValueError(f"monitors[{i}].endpoints: no endpoint named {unknown[0]!r}")
        slo_endpoints = endpoint_names | {"*"}
        regions = {r.name for r in self.regions} | {"*"}
        for i, slo in enumerate(self.slos):
            if slo.endpoint not in slo_endpoints:
                raise ValueError(f"slos[{i}].endpoint: no endpoint named {slo.endpoint!r}")
            if slo.region not in regions:
                raise ValueError(f"slos[{i}].region: no region named {slo.region!r}")
            if slo.pipeline not in {p.name for p in self.pipelines} | {"*"}:
                raise ValueError(f"slos[{i}].pipeline: no pipeline named {slo.pipeline!r}")
            if slo.metric in PIPELINE_METRICS and not self.pipelines:
                raise ValueError(f"slos[{i}].metric: {slo.metric} needs a [[pipelines]] section")
            if slo.metric == "pipeline_ttft" and not all(
                    self._streams_answer(p) for p in self.pipelines if slo.pipeline in ("*", p.name)):
                raise ValueError(f"slos[{i}].metric: pipeline_ttft needs a pipeline whose last stage streams its "
                                 "answer (a generative endpoint, prompts.stream true)")
            if slo.model != "*":
                mix = next((e.models for e in self.endpoints if e.name == slo.endpoint), ())
                if slo.metric not in (*TOKEN_METRICS, "latency") or not any(m.name == slo.model for m in mix):
                    raise ValueError(f"slos[{i}].model: names a model of the named endpoint's model list, for a "
                                     f"ttft, tpot, itl, e2e or latency SLO ({slo.model!r} is not one of "
                                     f"{slo.endpoint!r}'s: {', '.join(m.name for m in mix) or 'it has no list'})")
            if slo.metric in TOKEN_METRICS:
                generative = {e.name for e in self.endpoints if e.generative}
                if not generative or (slo.endpoint != "*" and slo.endpoint not in generative):
                    raise ValueError(f"slos[{i}].metric: {slo.metric} is a streamed request's: it needs "
                                     f"{'the endpoint ' + repr(slo.endpoint) if slo.endpoint != '*' else 'an endpoint'}"
                                     " of a generative protocol (openai-chat, openai-completions, triton-generate, "
                                     "kserve-grpc-stream)")
                whole = {e.name for e in self.endpoints if e.generative and e.prompts and not e.prompts.stream}
                if slo.metric != "e2e" and (slo.endpoint in whole or (slo.endpoint == "*" and generative <= whole)):
                    raise ValueError(f"slos[{i}].metric: {slo.metric} needs streamed responses, and "
                                     f"{', '.join(sorted(whole))} asks for whole ones (prompts.stream = false)")
        return self

    def _check_pipelines(self) -> None:
        """Each pipeline's stages name endpoints of a kind a stage can be, in an order that makes a chain; an
        endpoint of weight 0 is some pipeline's stage."""
        by_name = {e.name: e for e in self.endpoints}
        names = [p.name for p in self.pipelines]
        dupes = sorted({n for n in names if names.count(n) > 1} | (set(names) & set(by_name)))
        if dupes:
            raise ValueError(f"pipelines: name(s) {', '.join(dupes)} used twice (pipelines and endpoints share names)")
        if self.pipelines and self.load.scenario != "server":
            raise ValueError(f"pipelines: need the open-loop server scenario (load.scenario = \"server\"), not "
                             f"{self.load.scenario!r}")
        staged = set()
        for i, pipeline in enumerate(self.pipelines):
            for k, stage in enumerate(pipeline.stages):
                where = f"pipelines[{i}].stages[{k}].endpoint"
                ep = by_name.get(stage.endpoint)
                if ep is None:
                    raise ValueError(f"{where}: no endpoint named {stage.endpoint!r}")
                kind = PIPELINE_KINDS.get(ep.protocol)
                if kind is None:
                    raise ValueError(f"{where}: {stage.endpoint!r} speaks {ep.protocol}; a stage embeds "
                                     f"(openai-embeddings), reranks (rerank) or generates (openai-chat, "
                                     f"openai-completions, triton-generate)")
                if ep.sessions is not None:
                    raise ValueError(f"{where}: {stage.endpoint!r} runs sessions (its arrivals start "
                                     "conversations); a stage sends one request")
                if kind == "generate" and k != len(pipeline.stages) - 1:
                    raise ValueError(f"{where}: a generate stage ends its pipeline (nothing reads its answer), "
                                     f"but stage {k + 1} follows it")
                staged.add(stage.endpoint)
        idle = [e.name for e in self.endpoints if e.weight == 0 and e.name not in staged]
        if idle:
            raise ValueError(f"endpoints: {', '.join(idle)} has weight 0 and is no pipeline's stage: it would be sent "
                             "nothing")

    def _streams_answer(self, pipeline: Pipeline) -> bool:
        """The pipeline's last stage streams tokens (its answer has a first token)."""
        last = next(e for e in self.endpoints if e.name == pipeline.stages[-1].endpoint)
        return last.generative and (last.prompts is None or last.prompts.stream)

    def stage_endpoints(self) -> set[str]:
        """The endpoints some pipeline's stage sends to."""
        return {s.endpoint for p in self.pipelines for s in p.stages}

    @property
    def arrival_weights(self) -> tuple[float, ...]:
        """The arrival process's split: each endpoint's weight, then each pipeline's (arrival index ≥ the number of
        endpoints: a pipeline)."""
        return tuple(e.weight for e in self.endpoints) + tuple(p.weight for p in self.pipelines)

    @property
    def uses_embedded(self) -> bool:
        return any(e.url == EMBEDDED for e in self.endpoints)

    @property
    def network_endpoints(self) -> list[Endpoint]:
        return [e for e in self.endpoints if e.protocol != "inprocess"]

    @property
    def kserve_endpoints(self) -> list[Endpoint]:
        """The KServe v2 endpoints (every one but the generative and the embeddings)."""
        return [e for e in self.endpoints if not e.generative and not e.pooling]

    @property
    def uses_triton(self) -> bool:
        return any(e.url == TRITON for e in self.endpoints)


class ProfileError(Exception):
    """A profile that cannot be used; the message names the file and each bad field."""


def _field_path(loc: tuple) -> str:
    out = ""
    for k, part in enumerate(loc):
        if part == "models" and k and isinstance(loc[k - 1], int):  # an endpoint's mix: as written (`model = [...]`)
            part = "model"
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def parse_profile(data: dict, source: str) -> Profile:
    """Validate a profile mapping; ProfileError lists `source: field.path: problem` lines."""
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-after")))
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key (not part of the profile schema)"
            elif err["type"] == "missing":
                message = "required field is missing"
            lines.append(f"{source}: {_field_path(loc)}: {message}")
        raise ProfileError("\n".join(lines)) from None


def load_profile(path: Path, overrides: Sequence[str] = ()) -> Profile:
    """Read and validate a TOML profile, with `overrides` (contract/overrides.py: `field.path=value`) applied
    before validation, so they are checked like the file; the profile records them."""
    from tailrace.contract.overrides import OverrideError, apply

    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such profile") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    if "overrides" in data:
        raise ProfileError(f"{path}: overrides: set by --set and TAILRACE_SET_*, not in a profile file")
    if not overrides:
        return parse_profile(data, str(path))
    try:
        data = apply(data, list(overrides))
    except OverrideError as exc:
        raise ProfileError(f"{path}: {exc}") from None
    return parse_profile(data | {"overrides": list(overrides)}, f"{path} (with {', '.join(overrides)})")
