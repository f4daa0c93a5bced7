"""One builder for every generative protocol's sender — the worker's (harness/worker/endpoint_senders.py) and
`tailrace probe`'s: a streamed HTTP sender (OpenAI-compatible, Triton's generate_stream) or a gRPC ModelStreamInfer
sender, with the endpoint's timeouts, credential and TLS, its prompts encoded before the run (or built at each send:
`bodies` empty and `samples` their count), and the endpoint's tokenizer counting where the server reports no usage."""
from __future__ import annotations

from tailrace.contract.credentials import Credential
from tailrace.contract.plan import EndpointTimeouts, PoolLimits
from tailrace.contract.profile import Endpoint, Prompts
from tailrace.harness.client.generative import StreamSender
from tailrace.harness.client.grpc_stream import GrpcStreamSender, stream_request
from tailrace.harness.client.senders import Sender
from tailrace.harness.client.tls import sender_tls
from tailrace.harness.client.tokenizer import TokenCounter
from tailrace.harness.workload.media import media_bodies


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
