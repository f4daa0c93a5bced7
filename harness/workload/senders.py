"""Every endpoint's sender is built here — the worker's (harness/worker/endpoint_senders.py), `tailrace probe`'s and
the benches': each with the endpoint's timeouts, credential and TLS, its requests encoded before the run.

- KServe v2 (`kserve_sender`): HTTP, gRPC, or the model run inside the worker, from the plan's samples;
- pooling (`pooling_sender`): embeddings or rerank bodies drawn from the run's seed;
- generative (`generative_sender`, `stream_sender`): a streamed HTTP sender (OpenAI-compatible, Anthropic, Responses,
  Triton's generate_stream) or a gRPC ModelStreamInfer sender, its prompts encoded now (or built at each send:
  `bodies` empty and `samples` their count), the endpoint's tokenizer counting where the server reports no usage."""
from __future__ import annotations

from pathlib import Path

from tailrace.contract.credentials import Credential
from tailrace.contract.plan import EndpointTimeouts, PoolLimits
from tailrace.contract.profile import Embeddings, Endpoint, Prompts, Rerank
from tailrace.contract.requests import RequestSpec
from tailrace.harness.client.generative import StreamSender
from tailrace.harness.client.grpc_stream import GrpcStreamSender, stream_request
from tailrace.harness.client.pooling import EmbeddingsSender, PoolingSender, RerankSender
from tailrace.harness.client.request_data import SampleSet
from tailrace.harness.client.senders import GrpcSender, HttpSender, InProcessSender, Sender
from tailrace.harness.client.tls import sender_tls
from tailrace.harness.client.tokenizer import TokenCounter
from tailrace.harness.workload.media import media_bodies
from tailrace.harness.workload.pooling_requests import embedding_bodies, rerank_bodies


def stream_sender(ep: Endpoint, url: str, pool: PoolLimits, bodies=(), samples: int = 0,
                  counter: TokenCounter | None = None) -> StreamSender:
    """An HTTP stream sender of `bodies` (a sequence of encoded requests; empty: each built at its send)."""
    spec = ep.prompts or Prompts()
    return StreamSender(url, ep.protocol, list(bodies) if isinstance(bodies, tuple) else bodies,
                        EndpointTimeouts.of(ep), Credential.of(ep), sender_tls(ep), pool, stream=spec.stream,
                        model=ep.model, samples=samples, count_output=ep.token_count_output, counter=counter)


def generative_sender(ep: Endpoint, url: str, items: list[tuple[str | list, int]], seed: int, data_root,
                      model_inputs: tuple[str, ...] = (), pool: PoolLimits = PoolLimits.sized(16),
                      counter: TokenCounter | None = None) -> Sender:
    """The sender of a generative endpoint's prompts `items` ((prompt or messages, max_tokens)), encoded now."""
    if ep.protocol == "kserve-grpc-stream":
        spec = ep.prompts or Prompts()
        requests = [stream_request(ep.model, prompt, max_tokens, spec.ignore_eos, spec.min_tokens, model_inputs)
                    for prompt, max_tokens, *_ in items]  # (a line's request fields: for JSON bodies)
        return GrpcStreamSender(url, ep.model, requests, EndpointTimeouts.of(ep), Credential.of(ep), sender_tls(ep),
                                ep.token_count_output, counter)
    bodies, media = media_bodies(ep, seed, data_root, model_inputs, items)
    sender = stream_sender(ep, url, pool, bodies, counter=counter)
    sender.media = media  # each body's (media count, bytes): the request path records them
    return sender


def kserve_sender(endpoint: Endpoint, url: str, samples: SampleSet, request: RequestSpec, stride: int, pool: PoolLimits,
                 models_dir: Path, wanted: tuple[str, ...] = ()) -> Sender:
    """The sender for one endpoint of the plan, reaching it at `url`, with its requests encoded."""
    credential, tls, timeouts = Credential.of(endpoint), sender_tls(endpoint), EndpointTimeouts.of(endpoint)
    if endpoint.protocol == "kserve-http":
        return HttpSender(url, endpoint.model, samples, request, timeouts, pool, credential, stride, endpoint.binary,
                          endpoint.model_version, wanted, tls)
    if endpoint.protocol == "kserve-grpc":
        return GrpcSender(url, endpoint.model, samples, request, timeouts, credential, stride,
                          endpoint.model_version, wanted, tls)
    path = inprocess_model(models_dir, endpoint)
    if not path.exists():
        raise RuntimeError(f"endpoint {endpoint.name}: inprocess needs {path} (an ONNX model)")
    return InProcessSender(str(path), samples, request, stride, wanted)


def inprocess_model(models_dir: Path, endpoint: Endpoint) -> Path:
    """The ONNX file an inprocess endpoint runs."""
    return models_dir / endpoint.model / "1" / "model.onnx"


def pooling_sender(endpoint: Endpoint, url: str, pool: PoolLimits, seed: int, data_root: Path) -> PoolingSender:
    """The endpoint's sender with its bodies encoded now, its timeouts, credential and TLS."""
    timeouts, credential, tls = EndpointTimeouts.of(endpoint), Credential.of(endpoint), sender_tls(endpoint)
    if endpoint.protocol == "rerank":
        spec = endpoint.rerank or Rerank()
        return RerankSender(url, spec.api, spec.path, rerank_bodies(endpoint, seed, data_root), timeouts, credential,
                            tls, pool, spec.top_n)
    return EmbeddingsSender(url, embedding_bodies(endpoint, seed, data_root), timeouts, credential, tls, pool,
                            (endpoint.embeddings or Embeddings()).dimensions)
