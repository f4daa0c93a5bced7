"""Before any load: is each endpoint reachable, its model present and ready, and what request does it take?
Asked over the endpoint's own protocol (KServe v2 HTTP: /v2/models/{m}, /config, /ready; gRPC: ServerMetadata,
ModelMetadata, ModelConfig, ModelReady), once. The answer becomes the endpoint's resolved request
(contract/requests.py) in the run plan, and the endpoint's data is read and checked against it. Every problem
is one line naming the endpoint, the input and what differs; `tailrace run` and `tailrace master` exit 2 on
any, and `tailrace probe` prints them."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tailrace.contract.credentials import Credential, CredentialError
from tailrace.contract.plan import EndpointTimeouts, RunPlan
from tailrace.contract.profile import Endpoint, Tls
from tailrace.contract.requests import RequestSpec, RequestSpecError, declared_request, resolve_request, scenario_request
from tailrace.contract.tensors import TensorSpec, onnx_tensors
from tailrace.harness.client.request_data import DataError, samples_for
from tailrace.harness.client.tls import (
    TlsError,
    default_verify_context,
    describe_tls_failure,
    grpc_channel,
    sender_tls,
    ssl_context,
)
from tailrace.harness.workload.conversations import SessionFileError, session_source
from tailrace.harness.workload.graded_items import endpoint_prompts
from tailrace.harness.workload.media import MediaPrompts, carries_media, media_bodies
from tailrace.harness.workload.pipeline_requests import PipelineRequests
from tailrace.harness.workload.pooling_requests import pooling_bodies
from tailrace.harness.workload.prompts import PromptFileError
from tailrace.harness.workload.senders import inprocess_model
from tailrace.harness.workload.traces import TraceError, load_trace


@dataclass
class ModelInfo:
    """What the server says of a model."""

    server: dict = field(default_factory=dict)  # name, version, extensions
    name: str = ""
    versions: list[str] = field(default_factory=list)
    platform: str = ""
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    ready: bool = False
    max_batch_size: int | None = None  # from the model's config; None when the server gives none
    decoupled: bool | None = None  # the config's model_transaction_policy.decoupled; None without a config


class EndpointCheckError(Exception):
    """An endpoint that cannot take the run's requests, or inputs the run cannot use (a trace, a session file); the
    message names the endpoint or the file and what is wrong; `headline` says which."""

    headline = "an endpoint cannot take the run's requests"


def _tensors(items) -> list[TensorSpec]:
    return [TensorSpec(t["name"], t["datatype"], tuple(int(d) for d in t["shape"])) for t in items]


def _unreachable(where: str, exc: BaseException) -> EndpointCheckError:
    """'cannot reach …' with the TLS setting to look at when the handshake failed."""
    cause = exc
    while cause is not None and describe_tls_failure(cause) is None:
        cause = cause.__cause__ or cause.__context__
    return EndpointCheckError(f"cannot reach {where}: " + (describe_tls_failure(cause) if cause is not None
                                                          else str(exc)))


def model_info_http(url: str, model: str, version: str = "", timeout_s: float = 5.0,
                    headers: dict[str, str] | None = None, tls: Tls | None = None) -> ModelInfo:
    """Server and model metadata (and config, when the server has one) over KServe v2 HTTP(S); EndpointCheckError
    when unreachable, refused by TLS or unknown."""
    base = url.rstrip("/")
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "")
    verify = ssl_context(tls) if base.startswith("https://") else default_verify_context()
    extensions = {"sni_hostname": tls.server_name} if tls is not None and tls.server_name else {}
    try:
        with httpx.Client(timeout=timeout_s, headers=headers or {}, verify=verify) as client:
            get = lambda u: client.get(u, extensions=extensions)  # noqa: E731
            server = get(f"{base}/v2")
            meta = get(f"{base}{path}")
            ready = get(f"{base}{path}/ready")
            config = get(f"{base}{path}/config") if meta.status_code == 200 else None
    except httpx.RemoteProtocolError as exc:
        hint = ("; a server that asks for a client certificate closes such connections: set tls.cert and tls.key"
                if base.startswith("https://") and (tls is None or tls.cert is None) else "")
        raise EndpointCheckError(f"cannot reach {base}: {str(exc).rstrip('.')}{hint}") from None
    except httpx.HTTPError as exc:
        raise _unreachable(base, exc) from None
    if meta.status_code in (401, 403):
        raise EndpointCheckError(f"{base} refused the credential (HTTP {meta.status_code}: {_said(meta)}): check "
                                 "auth_header and auth_env / auth_file")
    if meta.status_code != 200:
        raise EndpointCheckError(f"model {model!r} is not on {base} (HTTP {meta.status_code}: {_said(meta)})")
    doc = meta.json()
    max_batch = decoupled = None
    if config is not None and config.status_code == 200:
        try:
            cfg = config.json()
            max_batch = int(cfg.get("max_batch_size", 0))
            decoupled = bool((cfg.get("model_transaction_policy") or {}).get("decoupled", False))
        except (ValueError, TypeError, AttributeError):
            max_batch = decoupled = None
    return ModelInfo(server=server.json() if server.status_code == 200 else {}, name=doc.get("name", model),
                     versions=list(doc.get("versions") or []), platform=doc.get("platform", ""),
                     inputs=_tensors(doc.get("inputs") or []), outputs=_tensors(doc.get("outputs") or []),
                     ready=ready.status_code == 200, max_batch_size=max_batch, decoupled=decoupled)


def _said(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", ""))[:200]
    except ValueError:
        return response.text[:200]


def model_info_grpc(url: str, model: str, version: str = "", timeout_s: float = 5.0,
                    headers: dict[str, str] | None = None, tls: Tls | None = None) -> ModelInfo:
    """Server and model metadata over KServe v2 gRPC (grpcs: TLS); EndpointCheckError when unreachable, refused
    by TLS or unknown."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    target = urlsplit(url).netloc
    metadata = [(k.lower(), v) for k, v in (headers or {}).items()]
    with grpc_channel(url, tls) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            server = stub.ServerMetadata(service_pb2.ServerMetadataRequest(), timeout=timeout_s, metadata=metadata)
        except grpc.RpcError as exc:
            details = exc.details() or ""
            if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                raise EndpointCheckError(f"{target} refused the credential ({exc.code().name}: {details}): check "
                                         "auth_header and auth_env / auth_file") from None
            hint = (": the TLS handshake failed — check tls.ca (the CA that signed the server's certificate), "
                    "tls.server_name, and tls.cert / tls.key when the server asks for a client certificate"
                    if url.startswith("grpcs://") and exc.code() == grpc.StatusCode.UNAVAILABLE else "")
            raise EndpointCheckError(f"cannot reach {target}: {exc.code().name} {details}{hint}") from None
        try:
            meta = stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=model, version=version),
                                      timeout=timeout_s, metadata=metadata)
            ready = stub.ModelReady(service_pb2.ModelReadyRequest(name=model, version=version),
                                    timeout=timeout_s, metadata=metadata).ready
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                raise EndpointCheckError(f"{target} refused the credential ({exc.code().name}: {exc.details()}): "
                                         "check auth_header and auth_env / auth_file") from None
            raise EndpointCheckError(f"model {model!r} is not on {target} ({exc.code().name}: "
                                     f"{exc.details()})") from None
        try:
            config = stub.ModelConfig(service_pb2.ModelConfigRequest(name=model, version=version),
                                      timeout=timeout_s, metadata=metadata).config
            max_batch, decoupled = int(config.max_batch_size), bool(config.model_transaction_policy.decoupled)
        except grpc.RpcError:  # a server without the configuration extension
            max_batch = decoupled = None
    tensors = lambda ts: [TensorSpec(t.name, t.datatype, tuple(t.shape)) for t in ts]  # noqa: E731
    return ModelInfo(server={"name": server.name, "version": server.version, "extensions": list(server.extensions)},
                     name=meta.name, versions=list(meta.versions), platform=meta.platform,
                     inputs=tensors(meta.inputs), outputs=tensors(meta.outputs), ready=ready,
                     max_batch_size=max_batch, decoupled=decoupled)


def served_models(url: str, timeout_s: float = 5.0, headers: dict[str, str] | None = None,
                  tls: Tls | None = None) -> list[str]:
    """The model IDs an OpenAI-compatible server lists (GET /v1/models); EndpointCheckError when unreachable,
    refused, or not such a server."""
    base = url.rstrip("/")
    verify = ssl_context(tls) if base.startswith("https://") else default_verify_context()
    extensions = {"sni_hostname": tls.server_name} if tls is not None and tls.server_name else {}
    try:
        with httpx.Client(timeout=timeout_s, headers=headers or {}, verify=verify) as client:
            response = client.get(f"{base}/v1/models", extensions=extensions)
    except TlsError:
        raise
    except httpx.HTTPError as exc:
        raise _unreachable(base, exc) from None
    if response.status_code in (401, 403):
        raise EndpointCheckError(f"{base} refused the credential (HTTP {response.status_code}: {_said(response)}): "
                                 "check auth_header and auth_env / auth_file")
    try:
        listed = response.json()["data"] if response.status_code == 200 else None
        ids = [str(m["id"]) for m in listed]
    except (ValueError, KeyError, TypeError):
        ids = None
    if ids is None:
        raise EndpointCheckError(f"{base}/v1/models answered HTTP {response.status_code} without a model list: not "
                                 "an OpenAI-compatible server")
    return ids


def check_generative(url: str, ep: Endpoint) -> None:
    """The endpoint's model (each of its mix) is one the server serves (before the start instant: nothing is sent
    otherwise)."""
    credential = Credential.of(ep)
    ids = served_models(url, timeout_s=EndpointTimeouts.of(ep).check_s,
                        headers=credential.headers() if credential else None, tls=sender_tls(ep))
    for model in [m.name for m in ep.models] or [ep.model]:  # every model of a mix
        if model not in ids:
            raise EndpointCheckError(f"model {model!r} is not served by {url.rstrip('/')} (it serves: "
                                     f"{', '.join(ids) or 'nothing'})")


def model_info(url: str, protocol: str, model: str, version: str = "", timeout_s: float = 5.0,
               headers: dict[str, str] | None = None, tls: Tls | None = None) -> ModelInfo:
    fetch = model_info_grpc if protocol == "kserve-grpc" else model_info_http
    try:
        return fetch(url, model, version, timeout_s, headers, tls)
    except TlsError as exc:
        raise EndpointCheckError(str(exc)) from None


def readiness(info: ModelInfo) -> list[str]:
    return [] if info.ready else ["the model is not ready"]


def endpoint_request(ep: Endpoint, info: ModelInfo | None, default_batch: int) -> RequestSpec:
    """The request `ep` sends: from the profile's declared inputs, else from the server's metadata and config."""
    declared = declared_request(ep, default_batch)
    if declared is not None:
        return declared
    source = "server metadata + config" if info.max_batch_size is not None else "server metadata"
    return resolve_request(ep, info.inputs, info.outputs, info.max_batch_size, default_batch, source)


def check_data(plan: RunPlan, ep: Endpoint, request: RequestSpec, here: bool = True) -> str | None:
    """Read the endpoint's data and check it against the request (DataError on a mismatch). `here=False`
    (a master whose workers hold the data): a file this host lacks is left to the workers; says so."""
    source = plan.data_source(ep)
    if not here and source not in ("random", "zero") and not Path(source).exists():
        return f"endpoint {ep.name}: data {source} is not on this host; each worker checks it before the start"
    samples_for(plan, ep, scenario_request(request, plan.batch_size(ep)))
    return None


@dataclass(frozen=True)
class Resolved:
    """What the endpoint check found: each KServe endpoint's request, notes (data left to the workers), and each
    triton-generate endpoint's model inputs."""

    requests: dict[str, RequestSpec]
    notes: list[str]
    model_inputs: dict[str, list[str]]


def check_generate(url: str, ep: Endpoint) -> list[str]:
    """A triton-generate or kserve-grpc-stream endpoint's model: known, ready, with a text_input (and decoupled, for
    a gRPC stream); its input names."""
    credential = Credential.of(ep)
    info = model_info(url, "kserve-grpc" if ep.protocol == "kserve-grpc-stream" else "kserve-http", ep.model,
                      ep.model_version, timeout_s=EndpointTimeouts.of(ep).check_s,
                      headers=credential.headers() if credential else None, tls=sender_tls(ep))
    if ep.protocol == "kserve-grpc-stream" and info.decoupled is False:
        raise EndpointCheckError(f"model {ep.model!r} on {url.rstrip('/')} is not decoupled (its config has no "
                                 "model_transaction_policy.decoupled): ModelStreamInfer would answer it once, not "
                                 "token by token; use kserve-grpc")
    names = [t.name for t in info.inputs]
    if "text_input" not in names:
        raise EndpointCheckError(f"model {ep.model!r} on {url.rstrip('/')} has no text_input input (it has "
                                 f"{', '.join(names) or 'none'}): not a model for Triton's generate extension")
    if not info.ready:
        raise EndpointCheckError(f"model {ep.model!r} on {url.rstrip('/')} is not ready")
    return names


def shared_data_problems(plan: RunPlan, data_here: bool) -> list[str]:
    """What the run's own files say is wrong, one line each: the trace it replays, its pipelines' RAG files (where
    the workers' files are here: `data_here`)."""
    profile, root, problems = plan.profile, Path(plan.data_root or "."), []
    trace = profile.load.arrivals.trace
    if trace is not None and data_here:  # a trace file, like a data file, lives where the workers run
        try:
            load_trace(trace, root, [e.name for e in profile.endpoints] + [p.name for p in profile.pipelines],
                       [r.name for r in profile.regions])
        except TraceError as exc:
            problems.append(f"load.arrivals.trace: {exc}")
    for i, pipeline in enumerate(profile.pipelines):
        if data_here or pipeline.file is None:
            try:
                PipelineRequests(pipeline, profile, profile.load.seed, root)
            except PromptFileError as exc:
                problems.append(f"pipelines[{i}] ({pipeline.name}): {exc}")
    return problems


def resolve_requests(plan: RunPlan, urls: dict[str, str] | None = None, data_here: bool = True) -> Resolved:
    """Check every endpoint of a plan (network endpoints over their protocol, inprocess ones from their ONNX
    file) and resolve its request; EndpointCheckError lists every problem, one line each, naming the
    endpoint."""
    profile = plan.profile
    default_batch = profile.inputs.batch_size
    requests, problems, notes, model_inputs = {}, [], [], {}
    for ep in profile.endpoints:
        url = (urls or {}).get(ep.name, ep.url)
        where = f"endpoint {ep.name} ({ep.model} on {url})"
        if ep.pooling:  # embeddings, rerank: the model must be served, and its texts must read
            try:
                if ep.rerank is None or ep.rerank.api != "tei":  # TEI serves one model and lists none
                    check_generative(url, ep)
                files = [f for f in ((ep.prompts.file if ep.prompts else None),
                                     (ep.rerank.file if ep.rerank else None)) if f]
                if data_here or not files:  # a prompt or RAG file is the workers'
                    pooling_bodies(ep, profile.load.seed, Path(plan.data_root or "."))
            except (EndpointCheckError, CredentialError, TlsError, PromptFileError) as exc:
                problems.append(f"endpoint {ep.name}: {exc}")
            continue
        if ep.generative:  # no tensors to resolve: the model must be served, and the prompts must read
            try:
                if ep.api.model_metadata:  # Triton's generate and ModelStreamInfer: the model's inputs
                    model_inputs[ep.name] = check_generate(url, ep)
                else:
                    check_generative(url, ep)
                if data_here or ep.prompts is None or (ep.prompts.file is None and ep.prompts.graded is None):
                    # a prompt or graded file is the workers'
                    if ep.sessions is not None:
                        session_source(ep, profile.load.seed, Path(plan.data_root or "."))
                        if carries_media(ep):  # its images and clips decode
                            MediaPrompts(ep, profile.load.seed, Path(plan.data_root or "."))
                    elif ep.api.grpc:  # ModelStreamInfer: its prompts read (its requests are tensors, built by the sender)
                        endpoint_prompts(ep, profile.load.seed, Path(plan.data_root or "."))
                    else:
                        media_bodies(ep, profile.load.seed, Path(plan.data_root or "."))
                if ep.prompts is None or ep.prompts.tokenizer is None:
                    notes.append(f"endpoint {ep.name}: prompt lengths are approximate (words ≈ tokens) and token "
                                 "counts come from the server; name the model's tokenizer.json in prompts.tokenizer "
                                 "for exact lengths")
            except (EndpointCheckError, CredentialError, TlsError, PromptFileError, SessionFileError) as exc:
                problems.append(f"endpoint {ep.name}: {exc}")
            continue
        try:
            if ep.protocol == "inprocess":
                inputs, outputs = onnx_tensors(inprocess_model(Path(plan.models_dir), ep))
                info = ModelInfo(name=ep.model, inputs=list(inputs), outputs=list(outputs), ready=True)
            else:
                credential = Credential.of(ep)
                info = model_info(url, ep.protocol, ep.model, ep.model_version,
                                  timeout_s=EndpointTimeouts.of(ep).check_s,
                                  headers=credential.headers() if credential else None, tls=sender_tls(ep))
        except (EndpointCheckError, CredentialError) as exc:
            problems.append(f"endpoint {ep.name}: {exc}")
            continue
        except ValueError as exc:  # an unreadable ONNX file
            problems.append(f"endpoint {ep.name}: {exc}")
            continue
        problems += [f"{where}: {p}" for p in readiness(info)]
        try:
            request = endpoint_request(ep, info, default_batch)
            requests[ep.name] = request
            note = check_data(plan, ep, request, data_here)
            if note:
                notes.append(note)
        except (RequestSpecError, DataError) as exc:
            problems.append(f"{where}: {exc}")
    problems += shared_data_problems(plan, data_here)
    if problems:
        error = EndpointCheckError("\n".join(problems))
        if all(p.startswith("load.arrivals.trace") for p in problems):
            error.headline = f"the trace {profile.load.arrivals.trace.file} cannot be replayed"
        raise error
    return Resolved(requests, notes, model_inputs)
