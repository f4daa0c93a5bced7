"""The embedded server's images and audio (endpoints/generation/media.py, requests.py): an image is its patch grid in
prompt tokens, a clip 25 tokens a second; a part it cannot read is a 400 naming it."""
from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest

from tailrace.endpoints.generation.requests import parse_completion
from tailrace.endpoints.serving.errors import InferenceError
from tailrace.harness.workload.media import synthetic_image, synthetic_wav


def body(*parts) -> bytes:
    return orjson.dumps({"model": "m", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "look at this"}, *parts]}]})


def image(width: int, height: int, fmt: str = "jpeg") -> dict:
    data = base64.b64encode(synthetic_image(width, height, fmt, np.random.default_rng(0))).decode()
    return {"type": "image_url", "image_url": {"url": f"data:image/{fmt};base64,{data}"}}


def test_an_image_is_its_28_pixel_patch_grid_and_a_clip_25_tokens_a_second():
    request = parse_completion(body(image(512, 512), image(100, 60, "png")), chat=True)
    assert request.text == "look at this" and request.media_tokens == 19 * 19 + 4 * 3
    clip = base64.b64encode(synthetic_wav(2.0, np.random.default_rng(1))).decode()
    request = parse_completion(body({"type": "input_audio", "input_audio": {"data": clip, "format": "wav"}}), chat=True)
    assert request.media_tokens == 50


@pytest.mark.parametrize("part, message", [
    ({"type": "image_url", "image_url": {"url": "https://example.test/cat.jpg"}}, "fetches no URLs"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}}, "not an image"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,***"}}, "not base64"),
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "not a wav file"),
    ({"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}, "'video_url' is not served"),
])
def test_a_part_the_server_cannot_read_is_named(part, message):
    with pytest.raises(InferenceError, match=message) as err:
        parse_completion(body(part), chat=True)
    assert "messages[0].content[1]" in str(err.value.message)
