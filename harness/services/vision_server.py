"""A real vision-language model server on loopback, started and stopped by PID: Hugging Face transformers' own
OpenAI-compatible server (`transformers serve`, in the vLLM virtualenv, which carries transformers and torch)
serving a tiny random-weight LLaVA built offline by deploy/vllm/tiny_vlm.py into a Hugging Face cache directory
(build/vlm-cache, once). vLLM's CPU build cannot serve a vision model here: its image processing needs a torchvision
built for its torch, and PyPI's is CUDA's (docs/DECISIONS.md). For tests and benchmarks of images in chat requests.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tailrace.harness.services.processes import ManagedProcess, free_port, start_process, wait_http_ok
from tailrace.harness.services.vllm_server import REPO_ROOT, built_once, vllm_python

VLM_SCRIPT = REPO_ROOT / "deploy" / "vllm" / "tiny_vlm.py"
DEFAULT_CACHE = REPO_ROOT / "build" / "vlm-cache"
VLM_NAME = "tailrace/tiny-vlm"
IMAGE_TOKENS = 16  # an image of the tiny LLaVA: (56 / 14)² patches
START_TIMEOUT_S = 180.0


def tiny_vlm(python: Path, cache: Path = DEFAULT_CACHE) -> Path:
    """The Hugging Face cache holding the tiny VLM, built once (seeded)."""
    return built_once(python, VLM_SCRIPT, cache, cache / f"models--{VLM_NAME.replace('/', '--')}" / "refs" / "main",
                      "the tiny VLM")


@dataclass
class VisionServer:
    process: ManagedProcess
    url: str  # http://127.0.0.1:PORT
    model: str

    def stop(self) -> None:
        self.process.stop(timeout=15)


def start_vision_server(log_dir: Path, python: str | None = None, cache: Path = DEFAULT_CACHE,
                        port: int | None = None, cpus: list[int] | None = None) -> VisionServer:
    """`transformers serve` on 127.0.0.1 with the tiny VLM's cache, offline; ready when /v1/models lists it."""
    interpreter = vllm_python(python)
    cache = tiny_vlm(interpreter, cache)
    port = port or free_port()
    argv = [str(interpreter.parent / "transformers"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1"}
    process = start_process(f"transformers serve :{port}", argv, log_dir / f"transformers-{port}.log", env=env,
                            cpus=cpus)
    server = VisionServer(process, f"http://127.0.0.1:{port}", VLM_NAME)
    try:
        wait_http_ok(f"{server.url}/v1/models", process, timeout=START_TIMEOUT_S)
    except BaseException:
        server.stop()
        raise
    return server
