"""Benchmark: the generator's CPU per embeddings and rerank request — the send, the reply's checks (every vector
parsed and checked finite, every result's index and score) — and per chat request carrying a 512 × 512 image (beside
the same chat request without it), beside a KServe request of the 64-float digits input, side by side in one run.
What one worker core can hold is 1 / (CPU per request).

The worker's own senders (harness/client/pooling.py over the keep-alive pool, bodies encoded before the run, the
same path the open loop drives inline) send to nginx answering constant replies (so the target costs the generator
nothing but the socket): an embeddings reply of one 384-float vector (one 64-word text), one of 32 vectors (a batch
of 32, base64), a rerank reply of 32 results (32 documents of 128 words) and a chat stream of 16 token events with its
usage (the chat bodies hold a 64-word prompt, one of them also a 512 × 512 JPEG as a base64 data URI, encoded
before the run as the worker encodes them). One request in flight; the process
(pinned to CPU 0, nginx to CPU 1) is measured with its CPU time; kinds alternate within each repeat.

    .venv/bin/python bench/pooling_cpu.py [--requests 3000] [--repeats 5] [--write]
"""
from __future__ import annotations

import argparse
import base64
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gevent import monkey  # noqa: I001 - the sender runs on gevent sockets, as inside a Locust worker

monkey.patch_all()

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np  # noqa: E402
import orjson  # noqa: E402

from bench.common import write_section  # noqa: E402
from bench.generator_open_loop import start_nginx  # noqa: E402
from bench.payload_cpu import KINDS, cpu_per_request, sender_for  # noqa: E402
from tailrace.contract.plan import EndpointTimeouts, PoolLimits  # noqa: E402
from tailrace.contract.profile import Endpoint  # noqa: E402
from tailrace.harness.client.pooling import EmbeddingsSender, RerankSender  # noqa: E402
from tailrace.harness.services.processes import free_port  # noqa: E402
from tailrace.harness.workload.pooling_requests import embedding_bodies, rerank_bodies  # noqa: E402
from tailrace.harness.workload.prompts import prompt_items  # noqa: E402
from tailrace.harness.workload.senders import generative_sender  # noqa: E402

COMMAND = ".venv/bin/python bench/pooling_cpu.py"
DIM, BATCH, DOCUMENTS, STREAM_TOKENS = 384, 32, 32, 16


def replies() -> dict[str, str]:
    """nginx's constant replies by route (JSON without single quotes)."""
    rng = np.random.default_rng(1)
    vector = [round(float(v), 7) for v in rng.standard_normal(DIM)]
    packed = base64.b64encode(rng.standard_normal(DIM).astype("<f4").tobytes()).decode()
    one = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": vector}], "model": "m",
           "usage": {"prompt_tokens": 64, "total_tokens": 64}}
    batch = {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": packed}
                                        for i in range(BATCH)], "model": "m",
             "usage": {"prompt_tokens": 64 * BATCH, "total_tokens": 64 * BATCH}}
    ranked = {"id": "r", "model": "m", "usage": {"prompt_tokens": 4000, "total_tokens": 4000},
              "results": [{"index": i, "relevance_score": 1.0 - i / DOCUMENTS} for i in range(DOCUMENTS)]}
    events = [{"id": "c", "object": "chat.completion.chunk", "model": "m",
               "choices": [{"index": 0, "delta": {"content": f" word{i}"}}]} for i in range(STREAM_TOKENS)]
    events.append({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [],
                   "usage": {"prompt_tokens": 425, "completion_tokens": STREAM_TOKENS, "total_tokens": 441}})
    stream = "".join(f"data: {orjson.dumps(e).decode()}\n\n" for e in events) + "data: [DONE]\n\n"
    models = orjson.dumps({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "bench"}]}).decode()
    return {"/one/v1/embeddings": orjson.dumps(one).decode(), "/batch/v1/embeddings": orjson.dumps(batch).decode(),
            "/v1/rerank": orjson.dumps(ranked).decode(), "/v1/chat/completions": stream,
            **{f"{prefix}/v1/models": models for prefix in ("", "/one", "/batch")}}


def pooling_senders(url: str) -> dict[str, object]:
    def endpoint(protocol: str, **fields) -> Endpoint:
        return Endpoint.model_validate({"name": "e", "url": url, "protocol": protocol, "model": "m", **fields})

    timeouts, pool, here = EndpointTimeouts(5.0), PoolLimits.sized(4), Path(".")
    one = embedding_bodies(endpoint("openai-embeddings", prompts={"input_tokens": 64, "count": 64}), 1, here)
    batch = embedding_bodies(endpoint("openai-embeddings", prompts={"input_tokens": 64, "count": 64},
                                      embeddings={"inputs": BATCH, "encoding_format": "base64"}), 1, here)
    ranked = rerank_bodies(endpoint("rerank", prompts={"input_tokens": 16, "count": 16},
                                    rerank={"documents": DOCUMENTS, "document_tokens": 128}), 1, here)
    chat = {"prompts": {"input_tokens": 64, "output_tokens": STREAM_TOKENS, "count": 16}}
    image = {"prompts": {**chat["prompts"], "images": {"width": 512, "height": 512, "distinct": 16}}}
    text_sender = generative_sender(endpoint("openai-chat", **chat), url, prompt_items(endpoint("openai-chat", **chat),
                                                                                       1, here), 1, here, pool=pool)
    image_ep = endpoint("openai-chat", **image)
    image_sender = generative_sender(image_ep, url, prompt_items(image_ep, 1, here), 1, here, pool=pool)
    return {"chat, 64 words (16 tokens streamed back)": text_sender,
            "chat, 64 words and a 512 × 512 JPEG (~55 kB base64)": image_sender,
            "embeddings, 1 text (64 words; 384 floats back)": EmbeddingsSender(f"{url}/one", one, timeouts, None,
                                                                               pool=pool),
            f"embeddings, a batch of {BATCH} (base64 back)": EmbeddingsSender(f"{url}/batch", batch, timeouts, None,
                                                                                pool=pool),
            f"rerank, {DOCUMENTS} documents of 128 words": RerankSender(url, "cohere", None, ranked, timeouts, None,
                                                                          pool=pool)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    os.sched_setaffinity(0, {0})
    with tempfile.TemporaryDirectory(prefix="tailrace-pooling-cpu-") as tmp:
        port = free_port()
        nginx = start_nginx(Path(tmp), port, routes=replies())
        try:
            time.sleep(1)
            url = f"http://127.0.0.1:{port}"
            reference = next(iter(KINDS))
            senders = {f"KServe {reference}": sender_for(url, KINDS[reference]), **pooling_senders(url)}
            for s in senders.values():
                s.warm_up()
                cpu_per_request(s, 200)
            results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in senders}
            for r in range(args.repeats):
                for kind, s in (senders.items() if r % 2 == 0 else reversed(senders.items())):
                    results[kind].append(cpu_per_request(s, args.requests))
                print(" | ".join(f"{k}: {v[-1][0] + v[-1][1]:.0f} µs" for k, v in results.items()), flush=True)
        finally:
            nginx.stop()
    lines = [f"Command: `{COMMAND} --requests {args.requests} --repeats {args.repeats}` (one request in flight; the "
             "generator on CPU 0, nginx answering a constant reply on CPU 1; median over the repeats, range).", "",
             "| request | CPU per request, user + system (µs) | user (µs) | × the KServe request | one core's "
             "requests/s at that CPU |", "|---|---|---|---|---|"]
    base = [u + s for u, s, _ in next(iter(results.values()))]
    for kind, values in results.items():
        totals = [u + s for u, s, _ in values]
        ratios = [t / b for t, b in zip(totals, base)]
        lines.append(f"| {kind} | {statistics.median(totals):.0f} ({min(totals):.0f}–{max(totals):.0f}) | "
                     f"{statistics.median(u for u, _, _ in values):.0f} | {statistics.median(ratios):.2f} "
                     f"({min(ratios):.2f}–{max(ratios):.2f}) | {1e6 / statistics.median(totals):,.0f} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        write_section("Generator CPU per embeddings, rerank and image request", f"""\
What one embeddings or rerank request costs the generator's core — its send and its reply's checks (each vector
parsed and checked finite; each result's index and score) — and a chat request with a 512 × 512 image beside the
same request without it, beside a KServe request of 64 floats, in one run.

{table}
""")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
