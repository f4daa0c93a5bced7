"""`tailrace probe URL --model M`: the first command to run against a staging endpoint. It prints the server's
and the model's metadata, the request tailrace would send (each input's name, datatype, shape, bytes) from the
given data, then sends a few requests and prints their latency, the server's timing and the outputs' shapes.
Exit 0 when every step worked, 1 on a mismatch or a failed request, 2 when the endpoint or the model cannot be
reached or the options are wrong."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from tailrace.contract.credentials import Credential, CredentialError
from tailrace.contract.exit_codes import FAIL, USAGE
from tailrace.contract.plan import EndpointTimeouts, PoolLimits, unresolved_plan
from tailrace.contract.profile import GENERATIVE, POOLING, Endpoint, ProfileError, Prompts, parse_profile
from tailrace.contract.requests import RequestSpec, RequestSpecError
from tailrace.harness.client.outcome import Send
from tailrace.harness.client.payloads import AnswerCheck, wanted_outputs
from tailrace.harness.client.pooling import EmbeddingsSender
from tailrace.harness.client.request_data import DataError, SampleSet, samples_for
from tailrace.harness.client.tls import sender_tls
from tailrace.harness.orchestration.endpoint_check import EndpointCheckError, endpoint_request, model_info, readiness
from tailrace.harness.workload.senders import kserve_sender


def protocol_of(url: str, protocol: str | None) -> str:
    """The protocol given, or the URL scheme's (grpc:// and grpcs:// → kserve-grpc, else kserve-http)."""
    return protocol or ("kserve-grpc" if url.startswith(("grpc://", "grpcs://")) else "kserve-http")


def probe_endpoint(url: str, model: str, protocol: str, version: str, data: str, shapes: dict[str, list[int]],
                   batch_size: int, timeout_ms: float, binary: bool | str, check: dict | None,
                   tls: dict | None = None, auth: dict | None = None, prompts: dict | None = None,
                   extra: dict | None = None) -> Endpoint:
    """The endpoint a probe talks to, validated like a profile's (ProfileError names the option). `tls`: the
    profile's tls table; `auth`: auth_header with auth_env or auth_file; `prompts`: a generative endpoint's."""
    entry = {"name": "probe", "url": url, "protocol": protocol, "model": model, "timeout_ms": timeout_ms,
             **(auth or {})}
    if protocol in GENERATIVE or protocol in POOLING:
        entry["prompts"] = {k: v for k, v in (prompts or {}).items() if protocol in GENERATIVE or k != "output_tokens"}
        entry.update(extra or {})
    else:
        entry.update(model_version=version, data=data, shapes=shapes, batch_size=batch_size, binary=binary)
    if check:
        entry["check"] = check
    if tls:
        entry["tls"] = tls
    profile = parse_profile({"name": "probe", "endpoints": [entry], "regions": [{"name": "here", "share": 1.0}],
                             "load": {"rate": 1, "duration_s": 1}}, "tailrace probe")
    return profile.endpoints[0]


def describe(request: RequestSpec, samples: SampleSet) -> list[str]:
    """The request tailrace sends, one line per input (datatype, shape, bytes of its first sample)."""
    lines = []
    for spec in request.inputs:
        first = samples.inputs[spec.name][0]
        size = sum(len(v) for v in first.reshape(-1)) if first.dtype == object else first.nbytes
        shape = request.input_shape(spec) if -1 not in spec.shape else [request.batch_size, *first.shape] \
            if request.batched else list(first.shape)
        lines.append(f"  input  {spec.name} {spec.datatype} {shape}: {size * request.batch_size:,} bytes of tensor "
                     f"data per request")
    return lines + [f"  asks for {', '.join(request.outputs)}; data: {samples.source} ({len(samples)} samples)"]


def run_probe(url: str, endpoint: Endpoint, requests: int) -> int:
    if endpoint.generative:
        return run_generative_probe(url, endpoint, requests)
    if endpoint.pooling:
        return run_pooling_probe(url, endpoint, requests)
    try:
        credential = Credential.of(endpoint)
        info = model_info(url, endpoint.protocol, endpoint.model, endpoint.model_version,
                          timeout_s=EndpointTimeouts.of(endpoint).total_s, tls=sender_tls(endpoint),
                          headers=credential.headers() if credential else None)
    except (EndpointCheckError, CredentialError) as exc:
        print(f"tailrace probe: {exc}", file=sys.stderr)
        return USAGE
    server = info.server
    print(f"server {server.get('name', '?')} {server.get('version', '')} ({endpoint.protocol} {url}); extensions: "
          f"{', '.join(server.get('extensions') or []) or 'none'}")
    batch = "none" if not info.max_batch_size else f"max_batch_size {info.max_batch_size}"
    print(f"model {info.name} versions {info.versions} platform {info.platform or '?'}: "
          f"{'ready' if info.ready else 'NOT READY'} (batch dimension: "
          f"{'unknown, no config' if info.max_batch_size is None else batch})")
    for kind, tensors in (("input", info.inputs), ("output", info.outputs)):
        for t in tensors:
            print(f"  {kind:6} {t}")
    plan = unresolved_plan(parse_profile({"name": "probe", "endpoints": [endpoint.model_dump()],
                                          "regions": [{"name": "here", "share": 1.0}],
                                          "load": {"rate": 1, "duration_s": 1}}, "tailrace probe"),
                           "probe", "", data_root=str(Path.cwd()))
    try:
        request = endpoint_request(endpoint, info, endpoint.batch_size or 1)
        samples = samples_for(plan, endpoint, request)
    except (RequestSpecError, DataError) as exc:
        print(f"MISMATCH: {exc}")
        return FAIL
    print(f"tailrace sends ({request.source}):")
    for line in describe(request, samples):
        print(line)
    problems = readiness(info)
    for p in problems:
        print(f"MISMATCH: {p}")
    if problems:
        return FAIL
    return _send_some(url, endpoint, request, samples, requests)


def _send_some(url: str, endpoint: Endpoint, request: RequestSpec, samples: SampleSet, requests: int) -> int:
    """Send `requests` requests one after another and print each outcome; 1 if any failed."""
    sender = kserve_sender(endpoint, url, samples, request, stride=1, pool=PoolLimits.sized(4), models_dir=Path("."),
                          wanted=tuple(request.outputs))
    check = AnswerCheck(endpoint.check, samples, request.batched)
    checked = set(wanted_outputs(endpoint.check, samples))
    failed = 0
    try:
        for k in range(requests):
            sample = k * request.batch_size
            start = time.perf_counter_ns()
            out = sender.send(Send(sample))
            ms = (time.perf_counter_ns() - start) / 1e6
            timing = (f"server queue {out.server_queue_ns / 1e6:.2f} ms, compute {out.server_compute_ns / 1e6:.2f} ms"
                      if out.server_compute_ns >= 0 else "no server timing")
            print(f"request {k + 1}: {out.status} in {ms:.2f} ms ({timing}; {out.bytes_out:,} B out, "
                  f"{out.bytes_in:,} B in)")
            if out.status != "ok":
                print(f"  {out.code} {out.error}")
                failed += 1
                continue
            for name, arr in (out.outputs or {}).items():
                print(f"  output {name} {_datatype(arr)} {list(arr.shape)}: {_preview(arr)}")
            if checked:
                first = sender.payloads.first_row(sample)
                outputs = out.outputs or {}
                right, prediction = check.score({n: outputs[n] for n in checked}, first, request.batch_size)
                label = check.label(first)
                print(f"  check: {right} of {request.batch_size} right" +
                      (f" (answered {prediction}, label {label})" if label >= 0 else ""))
    finally:
        sender.close()
    return FAIL if failed else 0


def _model_listed(url: str, endpoint: Endpoint, credential: Credential | None) -> bool:
    """Print what the server's /v1/models lists; False (and why, on stderr) when the endpoint's model is not there."""
    from tailrace.harness.orchestration.endpoint_check import served_models

    ids = served_models(url, timeout_s=EndpointTimeouts.of(endpoint).check_s, tls=sender_tls(endpoint),
                        headers=credential.headers() if credential else None)
    print(f"{url.rstrip('/')}/v1/models: {', '.join(ids) or 'none'}")
    if endpoint.model not in ids:
        print(f"tailrace probe: model {endpoint.model!r} is not served by {url.rstrip('/')}", file=sys.stderr)
    return endpoint.model in ids


def run_generative_probe(url: str, endpoint: Endpoint, requests: int) -> int:
    """A generative endpoint: the models it lists (its model's inputs, for triton-generate), then `requests` streamed
    prompts one after another, each
    with its TTFT (from the send), TPOT, tokens (and where their count came from), finish reason and first words."""
    from tailrace.harness.orchestration.endpoint_check import check_generate
    from tailrace.harness.workload.graded_items import endpoint_prompts
    from tailrace.harness.workload.senders import generative_sender

    inputs: list[str] = []
    try:
        credential = Credential.of(endpoint)
        if endpoint.api.model_metadata:  # Triton's generate and ModelStreamInfer: the model's inputs
            inputs = check_generate(url, endpoint)
            print(f"{url.rstrip('/')} model {endpoint.model}: ready, inputs {', '.join(inputs)}")
        elif not _model_listed(url, endpoint, credential):
            return USAGE
    except (EndpointCheckError, CredentialError) as exc:
        print(f"tailrace probe: {exc}", file=sys.stderr)
        return USAGE
    spec = endpoint.prompts or Prompts()
    api = endpoint.api
    print(f"tailrace sends {endpoint.protocol}: ~{spec.input_tokens.mean} words a prompt, max_tokens "
          f"{spec.output_tokens.mean}: {api.summary}, to {api.routes[0]}")
    sender = generative_sender(endpoint, url, endpoint_prompts(endpoint, 0, Path.cwd())[0], 0, Path.cwd(), tuple(inputs),
                               pool=PoolLimits.sized(1))
    failed = 0
    try:
        for k in range(requests):
            sent = [0]
            out = sender.send(Send(k, on_sent=lambda: sent.__setitem__(0, time.perf_counter_ns())))
            s = out.stream
            if out.status != "ok" or s is None:
                print(f"request {k + 1}: {out.status} ({out.code}) {out.error}")
                failed += 1
                continue
            ttft = (s.first_token_ns - sent[0]) / 1e6
            tpot = (s.last_token_ns - s.first_token_ns) / 1e6 / (s.output_tokens - 1) if s.output_tokens > 1 else None
            print(f"request {k + 1}: ok, TTFT {ttft:.1f} ms, TPOT " + (f"{tpot:.2f} ms" if tpot is not None else "–")
                  + f", {s.output_tokens} tokens out ({s.token_source}), {s.input_tokens} in, {len(s.event_ns)} "
                    f"events, finish {s.finish_reason or '–'}: {s.preview!r}")
    finally:
        sender.close()
    return FAIL if failed else 0


def _datatype(arr: np.ndarray) -> str:
    from tailrace.contract.tensors import datatype_of

    return datatype_of(arr)


def _preview(arr: np.ndarray, n: int = 6) -> str:
    flat = arr.reshape(-1)
    items = [repr(v[:24]) if isinstance(v, bytes) else f"{v:.4g}" if isinstance(v, float | np.floating) else str(v)
             for v in flat[:n].tolist()]
    return "[" + ", ".join(items) + (", …]" if flat.size > n else "]")


def parse_shapes(values: list[str]) -> dict[str, list[int]]:
    """`NAME=D1,D2` options (perf_analyzer's --shape NAME:D1,D2 also accepted) → {NAME: [D1, D2]}."""
    out = {}
    for v in values:
        name, sep, dims = v.replace(":", "=", 1).partition("=") if "=" not in v else v.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise ProfileError(f"--shape {v!r}: expected NAME=D1,D2,… (integers)") from None
    return out


def run_pooling_probe(url: str, endpoint: Endpoint, requests: int) -> int:
    """An embeddings or rerank endpoint: the models it lists (TEI's rerank: none), then `requests` requests one after
    another, each with its latency, what it carried, the server's token count and what the reply's checks found
    (an embeddings reply: its vectors' dimension)."""
    from tailrace.harness.workload.senders import pooling_sender

    tei = endpoint.rerank is not None and endpoint.rerank.api == "tei"
    try:
        credential = Credential.of(endpoint)
        if not tei and not _model_listed(url, endpoint, credential):
            return USAGE
        sender = pooling_sender(endpoint, url, PoolLimits.sized(1), 0, Path.cwd())
    except (EndpointCheckError, CredentialError) as exc:
        print(f"tailrace probe: {exc}", file=sys.stderr)
        return USAGE
    words = endpoint.prompts.input_tokens.mean if endpoint.prompts else 128
    unit = "document" if endpoint.protocol == "rerank" else "text"
    what = f"{unit}s of ~{words} words" if unit == "text" else f"a query of ~{words} words and its documents"
    print(f"tailrace sends {endpoint.protocol} to {sender.transport.base_path}{sender.path}: {what}")
    failed = 0
    try:
        for k in range(requests):
            start = time.perf_counter_ns()
            out = sender.send(Send(k))
            ms = (time.perf_counter_ns() - start) / 1e6
            carried = f"{out.batch} {unit}{'s' if out.batch != 1 else ''}"
            if out.status != "ok":
                print(f"request {k + 1}: {out.status} ({out.code}) in {ms:.2f} ms, {carried}: {out.error}")
                failed += 1
                continue
            dimensions = sender.dimensions if isinstance(sender, EmbeddingsSender) else None
            shape = f", {dimensions} dimensions" if dimensions else ""
            tokens = f"{out.input_tokens} tokens" if out.input_tokens >= 0 else "no usage"
            print(f"request {k + 1}: ok in {ms:.2f} ms, {carried} ({tokens}{shape}; {out.bytes_out:,} B out, "
                  f"{out.bytes_in:,} B in)")
    finally:
        sender.close()
    return FAIL if failed else 0
