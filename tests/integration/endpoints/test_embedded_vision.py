"""Images in chat requests on the embedded server for real: `tailrace run` of synthetic 512 × 512 images (1 to 3 a
request) against synthetic_lm, which prefills each as its 28-pixel patch grid (361 tokens) — the server's usage
per request is the text's words plus 361 an image —, and sessions whose first turn carries an image every later turn
resends; a directory holding an image that does not decode stops the run before anything is sent, in one line."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.harness.workload.media import synthetic_image
from tests.support import assert_valid, make_profile, run_with

pytestmark = pytest.mark.shares_machine


def test_images_are_prefilled_as_their_patches(model_repo, tmp_path):
    endpoint = {"name": "vlm", "url": "embedded", "protocol": "openai-chat", "model": "synthetic_lm",
                "prompts": {"input_tokens": 12, "output_tokens": 8, "count": 16,
                            "images": {"per_request": {"distribution": "uniform", "mean": 2, "min": 1, "max": 3},
                                       "width": 512, "height": 512, "format": "png", "distinct": 4}}}
    sessions = {"name": "vlm-chat", "url": "embedded", "protocol": "openai-chat", "model": "synthetic_lm",
                "prompts": {"input_tokens": 10, "output_tokens": 6, "images": {"per_request": 1, "width": 280,
                                                                               "height": 140}},
                "sessions": {"turns": 3, "think_s": 0.2}}
    profile = make_profile(model_repo, endpoints=[endpoint, sessions],
                           load={"rate": 8, "duration_s": 4, "warmup_s": 1, "seed": 4})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    every = analyze_run(run.run_dir).requests
    assert (every["status"] == "ok").all(), every["error"].unique()
    df = every[every["endpoint"] == "vlm"]
    assert len(df) > 8 and set(df["media_count"]) == {1, 2, 3}
    assert (df["input_tokens"] == 12 + 361 * df["media_count"]).all()
    assert (df["media_bytes"] > 100_000 * df["media_count"]).all()  # 512 × 512 PNGs of smooth noise
    # a session's first turn carries its image; every later turn resends it in the history: 10 × 5 patches each
    turns = every[every["endpoint"] == "vlm-chat"]
    assert turns["turn"].max() >= 2 and (turns["media_count"] == 1).all()
    assert (turns["input_tokens"] == turns["prompt_tokens_sent"] + 50).all()


def test_an_image_that_does_not_decode_exits_2_naming_it_and_sends_nothing(model_repo, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.png").write_bytes(synthetic_image(32, 32, "png", np.random.default_rng(0)))
    (images / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    profile = tmp_path / "p.toml"
    profile.write_text(f'name="x"\n[[endpoints]]\nname="vlm"\nurl="embedded"\nprotocol="openai-chat"\n'
                       f'model="synthetic_lm"\nprompts = {{ images = {{ dir = "{images}" }} }}\n'
                       f'[[regions]]\nname="a"\nshare=1\n[load]\nrate=5\nduration_s=2\n'
                       f'[embedded]\nmodels_dir="{model_repo}"\n')
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(profile), "--out", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert f"endpoint vlm: {images / 'b.jpg'}: not an image that decodes" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not list((tmp_path / "runs").glob("*/regions/*/*/requests-*"))  # nothing was sent
