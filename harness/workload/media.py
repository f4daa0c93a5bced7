"""Images and audio in chat requests, as OpenAI content parts built before the run (base64 encoding is never on the
send path): `image_url` (a base64 data URI, or an http(s) URL passed through), `input_audio` (base64 wav or mp3) and
vLLM's `video_url`.

Where they come from: synthetic — images of drawn width × height (smooth seeded noise, encoded by Pillow in the asked
format), tones of a given length (16 kHz mono wav, the standard library's `wave`) —, a directory's files taken in
turn, or a JSONL prompt file's own (`"images"` / `"image"`, `"audio"`, `"video"`: paths relative to the file, or
URLs; the LLaVA / ShareGPT-4V style). Every file is decoded once before the run: one that does not decode is a
PromptFileError naming it, and nothing is sent. Each request's media count and bytes (the files', before base64)
are recorded beside it."""
from __future__ import annotations

import base64
import io
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tailrace.contract.profile import Audio, Endpoint, Images, Prompts, TokenCount
from tailrace.harness.workload.graded_items import endpoint_prompts
from tailrace.harness.workload.prompts import FILE_PART, PromptFileError, data_path, draw_counts, prompt_bodies

MEDIA_STREAM = 7  # the seed's stream for media
IMAGE_SUFFIXES = {".jpg": "jpeg", ".jpeg": "jpeg", ".png": "png", ".webp": "webp", ".gif": "gif", ".bmp": "bmp"}
AUDIO_SUFFIXES = {".wav": "wav", ".mp3": "mp3"}
SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class Medium:
    """One image, clip or video as a content part, and the bytes it carries (before base64)."""

    part: dict
    size: int


def synthetic_image(width: int, height: int, fmt: str, rng: np.random.Generator) -> bytes:
    """A seeded image: coarse noise scaled up smoothly (compresses like a photograph, not like noise)."""
    from PIL import Image

    coarse = (rng.random((max(2, height // 32), max(2, width // 32), 3)) * 255).astype(np.uint8)
    image = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
    out = io.BytesIO()
    image.save(out, format=fmt.upper(), **({"quality": 85} if fmt in ("jpeg", "webp") else {}))
    return out.getvalue()


def synthetic_wav(seconds: float, rng: np.random.Generator) -> bytes:
    """A seeded tone with a little noise, 16 kHz mono 16-bit wav."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    signal = 0.3 * np.sin(2 * np.pi * rng.uniform(200, 800) * t) + 0.02 * rng.standard_normal(len(t))
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes((np.clip(signal, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


def image_part(data: bytes, fmt: str) -> Medium:
    return Medium({"type": "image_url", "image_url": {"url": f"data:image/{fmt};base64,"
                                                             f"{base64.b64encode(data).decode()}"}}, len(data))


def audio_part(data: bytes, fmt: str) -> Medium:
    return Medium({"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}},
                  len(data))


def checked_image(path: Path) -> tuple[bytes, str]:
    """A file's bytes and format, once Pillow has decoded it whole; PromptFileError naming it otherwise."""
    from PIL import Image, UnidentifiedImageError

    try:
        data = path.read_bytes()
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            fmt = (image.format or IMAGE_SUFFIXES.get(path.suffix.lower(), "jpeg")).lower()
    except OSError as exc:
        if isinstance(exc, UnidentifiedImageError) or not isinstance(exc, FileNotFoundError):
            raise PromptFileError(f"{path}: not an image that decodes ({exc})") from None
        raise PromptFileError(f"{path}: {exc.strerror or exc}") from None
    return data, "jpeg" if fmt == "mpo" else fmt


def checked_audio(path: Path) -> tuple[bytes, str]:
    """A wav (read whole by `wave`) or mp3 (its first frame's sync word) file's bytes and format; PromptFileError
    naming it when it is neither."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PromptFileError(f"{path}: {exc.strerror or exc}") from None
    fmt = AUDIO_SUFFIXES.get(path.suffix.lower())
    if fmt == "wav":
        try:
            with wave.open(io.BytesIO(data)) as w:
                if w.getnframes() == 0:
                    raise wave.Error("no frames")
        except (wave.Error, EOFError) as exc:
            raise PromptFileError(f"{path}: not a wav file that decodes ({exc})") from None
    elif fmt == "mp3":
        if not (data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0)):
            raise PromptFileError(f"{path}: not an mp3 file (no ID3 tag or frame sync)")
    else:
        raise PromptFileError(f"{path}: audio must be .wav or .mp3")
    return data, fmt


def _directory(path: Path, suffixes: dict[str, str], what: str) -> list[Path]:
    if not path.is_dir():
        raise PromptFileError(f"{path}: not a directory of {what}")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in suffixes)
    if not files:
        raise PromptFileError(f"{path}: no {what} ({', '.join(sorted(suffixes))})")
    return files


def image_pool(spec: Images, seed: int, data_root: Path) -> list[Medium]:
    """The images requests take in turn: the directory's, or `distinct` synthetic ones."""
    if spec.dir is not None:
        return [image_part(*checked_image(p)) for p in _directory(data_path(spec.dir, data_root), IMAGE_SUFFIXES,
                                                                    "images")]
    rng = np.random.default_rng([seed, MEDIA_STREAM, 1])
    widths, heights = draw_counts(spec.width, spec.distinct, rng), draw_counts(spec.height, spec.distinct, rng)
    return [image_part(synthetic_image(int(w), int(h), spec.format, rng), spec.format)
            for w, h in zip(widths.tolist(), heights.tolist())]


def audio_pool(spec: Audio, seed: int, data_root: Path) -> list[Medium]:
    """The clips requests take in turn: the directory's, or `distinct` synthetic tones."""
    if spec.dir is not None:
        return [audio_part(*checked_audio(p)) for p in _directory(data_path(spec.dir, data_root), AUDIO_SUFFIXES,
                                                                    "audio files")]
    rng = np.random.default_rng([seed, MEDIA_STREAM, 2])
    return [audio_part(synthetic_wav(spec.seconds, rng), "wav") for _ in range(spec.distinct)]


def file_medium(kind: str, ref: str, base: Path) -> Medium:
    """A prompt file's media reference: a URL passed through, or a file (relative to the prompt file) read and
    checked."""
    if ref.startswith(("http://", "https://")):
        key = {"image": "image_url", "video": "video_url"}.get(kind)
        if key is None:
            raise PromptFileError(f"{ref}: audio is sent as data (input_audio), not a URL")
        return Medium({"type": key, key: {"url": ref}}, 0)
    path = Path(ref) if Path(ref).is_absolute() else base / ref
    if kind == "image":
        return image_part(*checked_image(path))
    if kind == "audio":
        return audio_part(*checked_audio(path))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PromptFileError(f"{path}: {exc.strerror or exc}") from None
    fmt = path.suffix.lower().lstrip(".") or "mp4"
    return Medium({"type": "video_url", "video_url": {"url": f"data:video/{fmt};base64,"
                                                             f"{base64.b64encode(data).decode()}"}}, len(data))


class MediaPrompts:
    """Each prompt's media: its file's own references, else drawn from the profile's pools (`per_request` drawn per
    prompt from the seed, the pools taken in turn)."""

    def __init__(self, endpoint: Endpoint, seed: int, data_root: Path) -> None:
        spec = endpoint.prompts or Prompts()
        self.base = data_path(spec.file, data_root).parent if spec.file else data_root
        self.pools: list[tuple[TokenCount, float, list[Medium]]] = []
        if spec.images is not None:
            self.pools.append((spec.images.per_request, spec.images.share, image_pool(spec.images, seed, data_root)))
        if spec.audio is not None:
            self.pools.append((spec.audio.per_request, spec.audio.share, audio_pool(spec.audio, seed, data_root)))
        self.rng = np.random.default_rng([seed, MEDIA_STREAM, 3])
        self.taken = [0] * len(self.pools)
        self._files: dict[tuple[str, str], Medium] = {}

    def draw(self) -> list[Medium]:
        """The next request's media from the profile's pools."""
        out = []
        for i, (per_request, share, pool) in enumerate(self.pools):
            carries = self.rng.random() < share
            for _ in range(int(draw_counts(per_request, 1, self.rng)[0]) if carries else 0):
                out.append(pool[self.taken[i] % len(pool)])
                self.taken[i] += 1
        return out

    def _resolved(self, part: dict) -> Medium:
        key = (part["kind"], part["ref"])
        if key not in self._files:  # a file named on several lines is read and encoded once
            self._files[key] = file_medium(part["kind"], part["ref"], self.base)
        return self._files[key]

    def attach(self, prompt: str | list) -> tuple[list, int, int]:
        """(chat messages with the prompt's media as content parts after its last user text, media count, bytes)."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
        last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages) - 1)
        content = messages[last]["content"]
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        media = [self._resolved(p) for p in parts if p.get("type") == FILE_PART]
        text = [p for p in parts if p.get("type") != FILE_PART]
        media = media or self.draw()
        messages[last] = {**messages[last], "content": text + [m.part for m in media]}
        return messages, len(media), sum(m.size for m in media)



def carries_media(endpoint: Endpoint) -> bool:
    """The profile asks for images or audio in the endpoint's requests."""
    spec = endpoint.prompts or Prompts()
    return spec.images is not None or spec.audio is not None


def with_media(endpoint: Endpoint, items: list[tuple[str | list, int]], seed: int, data_root: Path
               ) -> tuple[list[tuple[list, int]], list[tuple[int, int]]]:
    """`items` with their media attached, and each one's (media count, bytes); unchanged (and no facts) for an
    endpoint that asks for none and a prompt file that names none."""
    spec = endpoint.prompts or Prompts()
    carries = any(isinstance(p, list) and any(isinstance(m.get("content"), list) for m in p) for p, *_ in items)
    if spec.images is None and spec.audio is None and not carries:
        return items, []
    media = MediaPrompts(endpoint, seed, data_root)
    out, facts = [], []
    for prompt, max_tokens, *fields in items:
        messages, count, size = media.attach(prompt)
        out.append((messages, max_tokens, *fields))
        facts.append((count, size))
    return out, facts


def media_bodies(endpoint: Endpoint, seed: int, data_root: Path, model_inputs: tuple[str, ...] = (),
                 items: list[tuple[str | list, int]] | None = None) -> tuple[list[bytes], list[tuple[int, int]]]:
    """A generative endpoint's request bodies with their media (prompt_bodies after with_media), and each one's
    (media count, bytes) — empty for an endpoint without media. The endpoint check reads them too: a file that does
    not decode stops the run before it starts."""
    items = endpoint_prompts(endpoint, seed, data_root)[0] if items is None else items
    items, facts = with_media(endpoint, items, seed, data_root)
    return prompt_bodies(endpoint, seed, data_root, model_inputs, items), facts
