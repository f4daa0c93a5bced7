"""The server's tokens, where the profile names its tokenizer (`prompts.tokenizer`: a Hugging Face
`tokenizer.json`, read with the `tokenizers` package; nothing is downloaded): synthetic prompts of exact token
lengths, and token counts of prompts and of outputs when the server reports no usage."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np


class TokenizerError(ValueError):
    """A tokenizer file that cannot be read (the message names it)."""


class PromptTokenizer:
    """One tokenizer.json: encode / count / decode without special tokens, and the vocabulary's plain word tokens
    (those that decode to letters and encode back to themselves; whole words, where a byte-level BPE has enough)
    to draw synthetic prompts from."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 - the Rust side raises a bare Exception for a malformed file
            raise TokenizerError(f"{path}: not a tokenizer.json the tokenizers package reads ({exc})") from None
        self.path = path
        self._words: np.ndarray | None = None

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def count_prompt(self, prompt: str | list) -> int:
        """A text's tokens, or a chat's: its messages' contents (the server's chat template adds a few)."""
        if isinstance(prompt, list):  # content parts: the text ones (images' and audio's tokens are the server's)
            return sum(self.count(m["content"] if isinstance(m["content"], str) else
                                  " ".join(p.get("text", "") for p in m["content"] if p.get("type") == "text"))
                       for m in prompt)
        return self.count(prompt)

    def word_ids(self) -> np.ndarray:
        if self._words is None:
            special = {t.content for t in self.tokenizer.get_added_tokens_decoder().values()}
            words, spaced = [], []
            for token, i in self.tokenizer.get_vocab().items():
                if token in special:
                    continue
                text = self.tokenizer.decode([i])
                if text.strip().isalpha() and self.tokenizer.encode(text, add_special_tokens=False).ids == [i]:
                    words.append(i)
                    if text.startswith(" "):  # a whole word of a byte-level BPE (GPT-2's "Ġword")
                        spaced.append(i)
            if not words:
                raise TokenizerError(f"{self.path}: no plain word tokens to build prompts from")
            self._words = np.array(sorted(spaced if len(spaced) >= 32 else words), dtype=np.int64)
        return self._words

    def text_of(self, ids: np.ndarray, target: int, rng: np.random.Generator) -> tuple[str, int]:
        """A text that encodes to `target` tokens, from the token ids `ids` (adjusted where decoding and encoding
        again merge or split at a boundary); (text, its token count — `target` unless no adjustment found it)."""
        ids = np.asarray(ids, dtype=np.int64)
        text = self.tokenizer.decode(ids.tolist())
        n = self.count(text)
        for _ in range(16):
            if n == target:
                break
            ids = ids[:len(ids) - (n - target)] if n > target else \
                np.concatenate([ids, rng.choice(self.word_ids(), target - n)])
            text = self.tokenizer.decode(ids.tolist())
            n = self.count(text)
        return text, n


@lru_cache(maxsize=8)
def load_tokenizer(path: str) -> PromptTokenizer:
    """The tokenizer at `path`, read once a process."""
    if not Path(path).is_file():
        raise TokenizerError(f"{path}: no such tokenizer file")
    return PromptTokenizer(Path(path))


class TokenCounter:
    """A sender's counts in the served model's tokens where the server reports none: each prompt's (counted before
    the run) and an output's text."""

    def __init__(self, tokenizer: PromptTokenizer, input_tokens: list[int]) -> None:
        self.tokenizer, self.input_tokens = tokenizer, input_tokens

    def fill(self, result, prompt_index: int, text: str) -> None:
        """Into a StreamOutcome: the prompt's tokens unless the server said, and the output's tokens (source
        "tokenizer") where the server reported no count ("events", or a whole response without usage)."""
        if result.input_tokens < 0 and prompt_index >= 0:
            result.input_tokens = self.input_tokens[prompt_index]
        if result.token_source in ("events", "") and text:
            result.output_tokens, result.token_source = self.tokenizer.count(text), "tokenizer"
