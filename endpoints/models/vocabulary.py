"""The generative models' vocabulary: whole words, one token each, so a prompt of k words is k input tokens.

Token 0 is the end of sequence; the rest are made-up words (a consonant-vowel syllable pair, deterministic). Text is
split on whitespace; a word outside the vocabulary maps to a token by a stable hash (crc32), so every prompt
encodes, and its token count is its word count.
"""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np

EOS = 0
EOS_TEXT = "</s>"
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def made_up_words(n: int) -> list[str]:
    """n distinct two-syllable words, always the same."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    words = [a + b for a in syllables for b in syllables]
    if n > len(words):
        raise ValueError(f"at most {len(words)} made-up words, asked {n}")
    return words[:n]


class WordVocabulary:
    """Word ↔ token id for the embedded generative models."""

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self._ids = {w: i for i, w in enumerate(words)}

    @classmethod
    def build(cls, size: int) -> "WordVocabulary":
        return cls([EOS_TEXT] + made_up_words(size - 1))

    @classmethod
    def read(cls, path: Path) -> "WordVocabulary":
        try:
            words = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read the vocabulary: {exc}") from None
        if not isinstance(words, list) or len(words) < 2 or not all(isinstance(w, str) for w in words):
            raise ValueError(f"{path}: a vocabulary is a JSON list of at least two words")
        return cls(words)

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.words))

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> np.ndarray:
        """The token ids of `text` (one per whitespace-separated word; never EOS)."""
        ids = self._ids
        span = len(self.words) - 1
        out = [ids.get(w) or 1 + zlib.crc32(w.encode()) % span for w in text.split()]
        return np.asarray(out, dtype=np.int64)

    def piece(self, token: int) -> str:
        """The text a generated token adds to the output: a space, then its word (nothing for the end of sequence,
        as servers skip special tokens)."""
        return " " + self.words[token] if token != EOS else ""
