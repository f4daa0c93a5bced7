"""Images in chat requests against a real vision-language model server (`transformers serve`, Hugging Face's
OpenAI-compatible server, serving a tiny random LLaVA built offline): synthetic images of a drawn count per request
(some requests text only) sent as data URIs, every stream ok, and the server's own prompt-token count — which
includes each image's 16 patch tokens — recorded beside each request's media count: the text's tokens plus 16 an
image, request by request."""
from __future__ import annotations

import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.harness.services.vision_server import IMAGE_TOKENS
from tests.support import assert_valid, make_profile, run_with, split_cpus, vision_server


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    with vision_server(tmp_path_factory.mktemp("vlm-logs")) as server:
        yield server


@pytest.mark.shares_machine  # functional: the server's token counts, request by request
def test_images_reach_a_real_vlm_and_its_prompt_tokens_count_them(vlm, model_repo, tmp_path):
    images = {"share": 0.8, "per_request": {"distribution": "uniform", "mean": 2, "min": 1, "max": 3},
              "width": {"distribution": "uniform", "mean": 200, "min": 64, "max": 320}, "height": 96, "distinct": 6}
    endpoint = {"name": "vlm", "url": vlm.url, "protocol": "openai-chat", "model": vlm.model, "timeout_ms": 30000,
                "prompts": {"input_tokens": 6, "output_tokens": 4, "count": 24, "ignore_eos": False, "images": images}}
    profile = make_profile(model_repo, endpoints=[endpoint], regions=[{"name": "near", "share": 1.0, "delay_ms": 2}],
                           load={"rate": 4, "duration_s": 6, "warmup_s": 1, "seed": 9},
                           generator={"cpus": split_cpus()[1]} if split_cpus()[1] else {})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    analysis = analyze_run(run.run_dir)
    df = analysis.requests
    assert len(df) > 15 and (df["status"] == "ok").all(), df["error"].unique()
    assert set(df["media_count"]) >= {0, 1, 2} and df["media_count"].max() <= 3
    assert ((df["media_count"] > 0) == (df["media_bytes"] > 0)).all()
    # the server's usage, per request: the prompt's text (and template) tokens, plus each image's patches
    text_tokens = df["input_tokens"] - IMAGE_TOKENS * df["media_count"]
    assert text_tokens.nunique() == 1 and text_tokens.iloc[0] >= 6, df[["input_tokens", "media_count"]]
    assert (df["ttft_ns"] > 0).all() and (df["token_source"] == "final_usage").all()
    row = analysis.summary.token_row("vlm", "near")
    assert row.media_per_request == pytest.approx(df.loc[df["phase"] > 0, "media_count"].mean())
    assert row.mean_input_tokens == pytest.approx(df.loc[df["phase"] > 0, "input_tokens"].mean())
