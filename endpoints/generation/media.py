"""Images and audio in a chat request, as the embedded server counts them: a vision-language model turns an image into
a grid of patch tokens and an audio model its clip into frames, each a token of the prompt it prefills. An image is
ceil(width / 28) × ceil(height / 28) tokens (Qwen2-VL's 14-pixel patches merged 2 × 2), a clip 25 tokens a second
(Qwen2-Audio's); the image's size is read from its header, a wav's length from its own, an mp3's from its bytes at
128 kb/s. A part the server cannot read is an InferenceError (400) naming it, as vLLM answers."""
from __future__ import annotations

import base64
import binascii
import io
import math
import wave

from tailrace.endpoints.serving.errors import InferenceError

PATCH_PIXELS = 28
AUDIO_TOKENS_PER_S = 25
MP3_BYTES_PER_S = 16_000


def _data(url: str, where: str) -> bytes:
    if url.startswith(("http://", "https://")):
        raise InferenceError(f"{where}: the embedded server fetches no URLs; send the file as a data URI")
    head, _, payload = url.partition(",")
    if not head.startswith("data:") or ";base64" not in head:
        raise InferenceError(f"{where}: must be a base64 data URI (data:…;base64,…)")
    return _b64(payload, where)


def _b64(payload: str, where: str) -> bytes:
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InferenceError(f"{where}: not base64") from None


def image_tokens(data: bytes, where: str) -> int:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except (UnidentifiedImageError, OSError):
        raise InferenceError(f"{where}: not an image") from None
    return math.ceil(width / PATCH_PIXELS) * math.ceil(height / PATCH_PIXELS)


def audio_tokens(data: bytes, fmt: str, where: str) -> int:
    if fmt == "wav":
        try:
            with wave.open(io.BytesIO(data)) as w:
                seconds = w.getnframes() / w.getframerate()
        except (wave.Error, EOFError):
            raise InferenceError(f"{where}: not a wav file") from None
    elif fmt == "mp3":
        seconds = len(data) / MP3_BYTES_PER_S
    else:
        raise InferenceError(f"{where}.format: wav or mp3, got {fmt!r}")
    return max(1, math.ceil(seconds * AUDIO_TOKENS_PER_S))


def media_tokens(part: dict, where: str) -> int:
    """The prompt tokens a non-text content part stands for."""
    kind = part.get("type")
    if kind == "image_url":
        url = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"), dict) else None
        if not isinstance(url, str):
            raise InferenceError(f"{where}.image_url.url: required")
        return image_tokens(_data(url, f"{where}.image_url.url"), where)
    if kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
            raise InferenceError(f"{where}.input_audio.data: required (base64)")
        return audio_tokens(_b64(audio["data"], f"{where}.input_audio.data"), audio.get("format", "wav"), where)
    raise InferenceError(f"{where}.type: {kind!r} is not served (text, image_url, input_audio)")
