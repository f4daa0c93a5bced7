"""An endpoint: where it is, what it speaks, what it is sent (tensors, prompts, media, sessions), its model mix and cancellation."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator, model_validator

from tailrace.contract.apis import APIS, ServingApi, listed, names_where, serving_api
from tailrace.contract.profile.base import (
    DATATYPES,
    GENERATIVE,
    INPROCESS,
    NAME,
    STARTED_BY_RUN,
    TLS_SCHEMES,
    TokenCount,
    _fixed,
    _Strict,
    check_url,
)
from tailrace.contract.profile.grading import Graded, grader_kind


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
        for key, what in (("structured", "a structured output ends where its JSON does"),
                          ("graded", "a graded answer ends where the model ends it")):
            if isinstance(data, dict) and data.get(key) is not None:
                if data.get("ignore_eos") is True:
                    raise ValueError(f"ignore_eos: {what}; leave ignore_eos out (it is false with {key}) or set it "
                                     "false")
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
    graded: Graded | None = Field(None, description="graded items: prompts from a file whose lines carry their "
                                                    "reference answers, each reply graded (accuracy under load)")
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
    grader: str = Field("contains", description="where a sessionized JSONL turn carries a \"reference\" (or "
                        "\"answer\"): the grader of that turn's reply (prompts.graded's graders)")
    server_state: bool = Field(False, description="openai-responses: the server keeps the conversation (store: true); "
                                                  "each later turn sends only its new input and names the previous "
                                                  "reply (previous_response_id)")

    @model_validator(mode="after")
    def _server_state(self) -> "Sessions":
        if self.server_state and (self.history != "actual" or self.on_context_limit != "end"):
            raise ValueError("server_state: the server keeps the actual conversation: history must be \"actual\" "
                             "and on_context_limit \"end\" (it cannot drop the oldest turns)")
        return self

    @field_validator("grader")
    @classmethod
    def _known_grader(cls, v: str) -> str:
        grader_kind(v)
        return v


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
                takers = tuple(a.name for a in APIS if getattr(a, trait))
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
