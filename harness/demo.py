"""`make demo`: build the models, start the embedded endpoint, talk to it with Triton's own clients."""
from __future__ import annotations

import argparse

import numpy as np

from endpoints.model_build import ONNX_MODELS, build_repository, load_heldout
from harness.processes import free_port, start_embedded_endpoint


def run_demo(args: argparse.Namespace) -> int:
    """Build, serve, infer over HTTP and gRPC with tritonclient, print the answers."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    models = args.workdir / "models"
    for m in build_repository(models):
        print(f"built {m.name:20s} held-out accuracy {m.accuracy:.4f}  {m.size_bytes:>8,} B  sha256 {m.sha256[:12]}")
    http_port, grpc_port = free_port(), free_port()
    endpoint = start_embedded_endpoint(models, "127.0.0.1", http_port, grpc_port, args.workdir / "endpoint.log")
    try:
        X, y = load_heldout(models)
        http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        for model in ONNX_MODELS:
            for proto, client, mod in (("http", http, httpclient), ("grpc", grpc, grpcclient)):
                inp = mod.InferInput("input", [8, 64], "FP32")
                inp.set_data_from_numpy(X[:8])
                result = client.infer(model, [inp])
                labels = result.as_numpy("label")
                print(f"{proto:4s} {model:20s} predicted {labels.tolist()} true {y[:8].tolist()} "
                      f"({int(np.sum(labels == y[:8]))}/8 correct)")
        stats = http.get_inference_statistics("digits_mlp_fp32")["model_stats"][0]["inference_stats"]
        print(f"server statistics digits_mlp_fp32: success={stats['success']['count']} "
              f"queue={stats['queue']['ns'] / 1e6:.2f} ms compute_infer={stats['compute_infer']['ns'] / 1e6:.2f} ms")
    finally:
        endpoint.stop()
    return 0
