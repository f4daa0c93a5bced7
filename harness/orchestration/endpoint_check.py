"""Before any load: is each endpoint reachable, its model present and ready, and does the model take the request
the generator will send? Asked over the endpoint's own protocol (KServe v2 HTTP: /v2/models/{m}, /ready;
gRPC: ServerReady, ModelMetadata, ModelReady). Every problem is one line naming the endpoint, the input and
what differs; `tailrace run` and `tailrace master` exit 2 on any, and `tailrace probe` prints them."""
from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.name} {self.datatype} {list(self.shape)}"


@dataclass
class ModelInfo:
    """What the server says of a model."""

    server: dict = field(default_factory=dict)  # name, version, extensions
    name: str = ""
    versions: list[str] = field(default_factory=list)
    platform: str = ""
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)
    ready: bool = False


class EndpointCheckError(Exception):
    """An endpoint that cannot take the run's requests; the message names the endpoint and what is wrong."""


def _tensors(items) -> list[Tensor]:
    return [Tensor(t["name"], t["datatype"], tuple(int(d) for d in t["shape"])) for t in items]


def model_info_http(url: str, model: str, version: str = "", timeout_s: float = 5.0,
                    headers: dict[str, str] | None = None) -> ModelInfo:
    """Server and model metadata over KServe v2 HTTP; EndpointCheckError when unreachable or unknown."""
    base = url.rstrip("/")
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "")
    try:
        with httpx.Client(timeout=timeout_s, headers=headers or {}) as client:
            server = client.get(f"{base}/v2")
            meta = client.get(f"{base}{path}")
            ready = client.get(f"{base}{path}/ready")
    except httpx.HTTPError as exc:
        raise EndpointCheckError(f"cannot reach {base}: {exc}") from None
    if meta.status_code != 200:
        raise EndpointCheckError(f"model {model!r} is not on {base} (HTTP {meta.status_code}: {_said(meta)})")
    doc = meta.json()
    return ModelInfo(server=server.json() if server.status_code == 200 else {}, name=doc.get("name", model),
                     versions=list(doc.get("versions") or []), platform=doc.get("platform", ""),
                     inputs=_tensors(doc.get("inputs") or []), outputs=_tensors(doc.get("outputs") or []),
                     ready=ready.status_code == 200)


def _said(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", ""))[:200]
    except ValueError:
        return response.text[:200]


def model_info_grpc(url: str, model: str, version: str = "", timeout_s: float = 5.0,
                    headers: dict[str, str] | None = None) -> ModelInfo:
    """Server and model metadata over KServe v2 gRPC; EndpointCheckError when unreachable or unknown."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    target = urlsplit(url).netloc
    metadata = [(k.lower(), v) for k, v in (headers or {}).items()]
    with grpc.insecure_channel(target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            server = stub.ServerMetadata(service_pb2.ServerMetadataRequest(), timeout=timeout_s, metadata=metadata)
        except grpc.RpcError as exc:
            raise EndpointCheckError(f"cannot reach {target}: {exc.code().name} {exc.details()}") from None
        try:
            meta = stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=model, version=version),
                                      timeout=timeout_s, metadata=metadata)
            ready = stub.ModelReady(service_pb2.ModelReadyRequest(name=model, version=version),
                                    timeout=timeout_s, metadata=metadata).ready
        except grpc.RpcError as exc:
            raise EndpointCheckError(f"model {model!r} is not on {target} ({exc.code().name}: "
                                     f"{exc.details()})") from None
    tensors = lambda ts: [Tensor(t.name, t.datatype, tuple(t.shape)) for t in ts]  # noqa: E731
    return ModelInfo(server={"name": server.name, "version": server.version, "extensions": list(server.extensions)},
                     name=meta.name, versions=list(meta.versions), platform=meta.platform,
                     inputs=tensors(meta.inputs), outputs=tensors(meta.outputs), ready=ready)


def model_info(url: str, protocol: str, model: str, version: str = "", timeout_s: float = 5.0,
               headers: dict[str, str] | None = None) -> ModelInfo:
    fetch = model_info_grpc if protocol == "kserve-grpc" else model_info_http
    return fetch(url, model, version, timeout_s, headers)


def mismatches(info: ModelInfo, sends: list[Tensor], reads: list[str]) -> list[str]:
    """What differs between the request the generator sends (`sends`: inputs with the shape of one request, -1
    where not known here; `reads`: the outputs it asks for) and the model; [] when the model takes it."""
    problems = [] if info.ready else ["the model is not ready"]
    model_inputs = {t.name: t for t in info.inputs}
    for sent in sends:
        want = model_inputs.get(sent.name)
        if want is None:
            problems.append(f"input {sent.name!r}: the model has no such input (its inputs: "
                            f"{', '.join(map(str, info.inputs)) or 'none'})")
            continue
        if sent.datatype != want.datatype:
            problems.append(f"input {sent.name!r}: tailrace sends {sent.datatype}, the model takes {want.datatype}")
        if len(sent.shape) != len(want.shape) or any(w >= 0 and 0 <= s != w for s, w in zip(sent.shape, want.shape)):
            problems.append(f"input {sent.name!r}: tailrace sends shape {list(sent.shape)}, the model takes "
                            f"{list(want.shape)}")
    for name in sorted(set(model_inputs) - {t.name for t in sends}):
        problems.append(f"input {name!r}: the model needs it and tailrace does not send it")
    outputs = {t.name for t in info.outputs}
    problems += [f"output {name!r}: the model has no such output (its outputs: "
                 f"{', '.join(map(str, info.outputs)) or 'none'})" for name in reads if name not in outputs]
    return problems


def check_endpoints(plan_profile, n_features: int, batch_size: int, urls: dict[str, str] | None = None) -> None:
    """Check every network endpoint of a (resolved) profile; EndpointCheckError lists every problem, one line
    each, naming the endpoint. `urls`: where to reach each endpoint from here (default: its url)."""
    from harness.worker.senders import request_signature

    sends, reads = request_signature(n_features, batch_size)
    tensors = [Tensor(name, datatype, shape) for name, datatype, shape in sends]
    problems = []
    for ep in plan_profile.network_endpoints:
        url = (urls or {}).get(ep.name, ep.url)
        auth = {ep.auth_header: ep.auth_value() or ""} if ep.auth_header else None
        try:
            info = model_info(url, ep.protocol, ep.model, timeout_s=min(10.0, ep.timeout_ms / 1000), headers=auth)
        except EndpointCheckError as exc:
            problems.append(f"endpoint {ep.name}: {exc}")
            continue
        problems += [f"endpoint {ep.name} ({ep.model} on {url}): {p}" for p in mismatches(info, tensors, reads)]
    if problems:
        raise EndpointCheckError("\n".join(problems))
