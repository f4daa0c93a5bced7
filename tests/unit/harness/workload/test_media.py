"""Images and audio in chat requests (harness/workload/media.py): content parts built before the run — synthetic,
a directory's files, a prompt file's own — each request's media count and bytes, files that do not decode refused
naming them."""
from __future__ import annotations

import base64
import io
import wave
from pathlib import Path

import orjson
import pytest
from PIL import Image

from tailrace.contract.profile import Endpoint, ProfileError, parse_profile
from tailrace.harness.client.tokenizer import PromptTokenizer
from tailrace.harness.workload.media import media_bodies, synthetic_image, synthetic_wav
from tailrace.harness.workload.prompts import PromptFileError


def chat(**prompts) -> Endpoint:
    return Endpoint.model_validate({"name": "vlm", "url": "http://127.0.0.1:9", "protocol": "openai-chat",
                                    "model": "m", "prompts": {"input_tokens": 6, "count": 8, **prompts}})


def parts(body: bytes) -> list[dict]:
    return orjson.loads(body)["messages"][-1]["content"]


def decoded(part: dict) -> Image.Image:
    url = part["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


def test_synthetic_images_of_drawn_sizes_as_data_uris_with_their_counts_and_bytes():
    ep = chat(images={"per_request": {"distribution": "uniform", "mean": 2, "min": 1, "max": 3},
                      "width": {"distribution": "uniform", "mean": 400, "min": 300, "max": 500}, "height": 256,
                      "distinct": 5})
    bodies, facts = media_bodies(ep, 7, Path("."))
    assert len(bodies) == len(facts) == 8
    for body, (count, size) in zip(bodies, facts):
        content = parts(body)
        assert content[0]["type"] == "text" and len(content[0]["text"].split()) == 6
        images = [p for p in content if p["type"] == "image_url"]
        assert len(images) == count and 1 <= count <= 3
        assert size == sum(len(base64.b64decode(p["image_url"]["url"].split(",", 1)[1])) for p in images)
        assert all(300 <= decoded(p).size[0] <= 500 and decoded(p).size[1] == 256 for p in images)
    assert len({c for c, _ in facts}) > 1  # drawn per request
    again, _ = media_bodies(ep, 7, Path("."))
    assert again == bodies  # the same on every worker


def test_synthetic_audio_is_a_wav_of_the_asked_length():
    bodies, facts = media_bodies(chat(audio={"seconds": 1.5, "distinct": 2}), 1, Path("."))
    clip = parts(bodies[0])[1]["input_audio"]
    assert clip["format"] == "wav"
    with wave.open(io.BytesIO(base64.b64decode(clip["data"]))) as w:
        assert w.getframerate() == 16_000 and w.getnframes() == 24_000
    assert facts[0] == (1, len(base64.b64decode(clip["data"])))


def test_a_directorys_files_in_turn_and_one_that_does_not_decode_is_named(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    (tmp_path / "a.png").write_bytes(synthetic_image(64, 48, "png", rng))
    (tmp_path / "b.jpg").write_bytes(synthetic_image(32, 32, "jpeg", rng))
    (tmp_path / "notes.txt").write_text("not an image, not taken")
    bodies, facts = media_bodies(chat(images={"dir": str(tmp_path)}), 1, tmp_path)
    formats = [parts(b)[1]["image_url"]["url"].split(";")[0] for b in bodies]
    assert formats[:4] == ["data:image/png", "data:image/jpeg"] * 2
    assert [f[1] for f in facts[:2]] == [(tmp_path / "a.png").stat().st_size, (tmp_path / "b.jpg").stat().st_size]
    (tmp_path / "c.jpeg").write_bytes(b"\xff\xd8 truncated")
    with pytest.raises(PromptFileError, match=r"c\.jpeg: not an image that decodes"):
        media_bodies(chat(images={"dir": str(tmp_path)}), 1, tmp_path)


def test_a_prompt_files_own_images_audio_and_urls(tmp_path):
    import numpy as np

    (tmp_path / "cat.png").write_bytes(synthetic_image(40, 30, "png", np.random.default_rng(1)))
    (tmp_path / "hello.wav").write_bytes(synthetic_wav(0.5, np.random.default_rng(2)))
    lines = [{"prompt": "what is in the picture", "image": "cat.png"},
             {"messages": [{"role": "user", "content": "describe both"}], "images": ["cat.png", "https://x.test/d.jpg"],
              "audio": "hello.wav"},
             {"prompt": "no media on this line"}]
    (tmp_path / "p.jsonl").write_text("".join(orjson.dumps(line).decode() + "\n" for line in lines))
    ep = chat(file="p.jsonl")
    bodies, facts = media_bodies(ep, 1, tmp_path)
    assert [p["type"] for p in parts(bodies[0])] == ["text", "image_url"]
    second = parts(bodies[1])
    assert [p["type"] for p in second] == ["text", "image_url", "image_url", "input_audio"]
    assert second[2]["image_url"]["url"] == "https://x.test/d.jpg"  # a URL passes through
    size = (tmp_path / "cat.png").stat().st_size
    assert facts == [(1, size), (3, size + (tmp_path / "hello.wav").stat().st_size), (0, 0)]
    assert parts(bodies[2]) == [{"type": "text", "text": "no media on this line"}]
    (tmp_path / "p.jsonl").write_text('{"prompt": "x", "image": "missing.png"}\n')
    with pytest.raises(PromptFileError, match=r"missing\.png"):
        media_bodies(ep, 1, tmp_path)
    (tmp_path / "p.jsonl").write_text('{"prompt": "x", "images": [3]}\n')
    with pytest.raises(PromptFileError, match=r"p\.jsonl:1: images: each must be a path or URL"):
        media_bodies(ep, 1, tmp_path)


def test_a_tokenizer_counts_the_text_parts_only(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    counter = PromptTokenizer(tmp_path / "tokenizer.json")
    messages = [{"role": "user", "content": [{"type": "text", "text": "a b a"},
                                             {"type": "image_url", "image_url": {"url": "data:…"}}]}]
    assert counter.count_prompt(messages) == 3


@pytest.mark.parametrize("endpoint, message", [
    ({"protocol": "openai-completions"}, "prompts.images: for openai-chat, anthropic-messages and openai-responses"),
    ({"protocol": "anthropic-messages", "prompts": {"audio": {"seconds": 1.0}}}, "prompts.audio: for openai-chat"),
])
def test_media_on_the_wrong_endpoint_is_one_line(endpoint, message):
    ep = {"name": "vlm", "url": "http://127.0.0.1:9", "protocol": "openai-chat", "model": "m",
          "prompts": {"images": {"width": 64}}, **endpoint}
    with pytest.raises(ProfileError, match=message):
        parse_profile({"name": "p", "endpoints": [ep], "regions": [{"name": "r", "share": 1.0}],
                       "load": {"rate": 1, "duration_s": 1}}, "p.toml")
