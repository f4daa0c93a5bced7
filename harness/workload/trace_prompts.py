"""A trace's prompts, built one row at a time ahead of its send, from cached blocks: an hour of a conversation
trace is ~170 M words, so nothing is built for rows the run does not send, nor all at once. A row is built in pieces
(`build`: each block it lacks, then its body), so that the issue loop can build it in the gaps between sends
(harness/worker/build_ahead.py).

A row with `hash_ids` (Mooncake) is made of its blocks: block id b is always the same BLOCK_TOKENS words (seeded by
the run's seed and b), so two rows that share a leading run of ids share exactly that prefix of text — the trace's
prefix reuse reproduced at the server — and the row's last block is cut to its `input_length`. A row without them
is `input_length` words of its own. With `prompts.tokenizer`, blocks are the tokenizer's word tokens instead and a row's
prompt is exactly its `input_length` of them. Blocks are kept in a bounded least-recently-used cache.

Beside each body: the prompt's length as built, and the tokens an unbounded prefix cache would hold of it (its
leading blocks already sent in the replay's order, whole cache blocks of 16 tokens, never the last token).
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import orjson

from tailrace.contract.profile import Endpoint, Prompts
from tailrace.harness.client.apis import body_extra
from tailrace.harness.client.generative import request_body
from tailrace.harness.client.tokenizer import PromptTokenizer
from tailrace.harness.workload.conversations import BLOCK_TOKENS
from tailrace.harness.workload.prompts import WORDS, draw_counts
from tailrace.harness.workload.turns import Build, Piece

TRACE_BLOCK_TOKENS = 512  # Mooncake's hash_ids: one id per 512-token block
BLOCK_CACHE = 4096  # block texts kept (~3.5 kB each, and as much again JSON-escaped)
PROMPT_MARK = "\x00tailrace prompt\x00"  # stands for the prompt in a body's template (as JSON: split there)


class TracePrompts:
    """The request bodies of a trace's rows (`rows[i]` builds row i's body), with what each prompt is."""

    def __init__(self, endpoint: Endpoint, input_tokens: np.ndarray | None, output_tokens: np.ndarray | None,
                 hash_ids: list[tuple[int, ...]] | None, order: np.ndarray, seed: int,
                 model_inputs: tuple[str, ...] = (), tokenizer: PromptTokenizer | None = None) -> None:
        self.endpoint, self.seed, self.model_inputs = endpoint, seed, model_inputs
        self.spec = endpoint.prompts or Prompts()
        n = len(input_tokens if input_tokens is not None else output_tokens if output_tokens is not None else order)
        rng = np.random.default_rng([seed, 2])
        drawn_in, drawn_out = draw_counts(self.spec.input_tokens, n, rng), draw_counts(self.spec.output_tokens, n, rng)
        self.inputs = drawn_in if input_tokens is None else np.where(input_tokens > 0, input_tokens, drawn_in)
        self.outputs = drawn_out if output_tokens is None else np.where(output_tokens > 0, output_tokens, drawn_out)
        self.hash_ids, self.tokenizer = hash_ids, tokenizer
        self._blocks: OrderedDict[int, str | np.ndarray] = OrderedDict()
        self._escaped: dict[int, bytes] = {}  # a cached text block as it stands in a JSON string
        self.ideal = ideal_cached(self.inputs, hash_ids, order) if hash_ids is not None else None

    def __len__(self) -> int:
        return len(self.inputs)

    def _block(self, block_id: int) -> str | np.ndarray:
        """Block `block_id`: its words (text), or with a tokenizer its token ids."""
        text = self._blocks.get(block_id)
        if text is None:
            rng = np.random.default_rng([self.seed, 6, block_id])
            if self.tokenizer is not None:
                text = rng.choice(self.tokenizer.word_ids(), TRACE_BLOCK_TOKENS)
            else:
                text = " ".join([WORDS[i] for i in rng.integers(0, len(WORDS), TRACE_BLOCK_TOKENS).tolist()])
            self._blocks[block_id] = text
            if isinstance(text, str):
                self._escaped[block_id] = _escaped(text)
            if len(self._blocks) > BLOCK_CACHE:
                self._escaped.pop(self._blocks.popitem(last=False)[0], None)
        else:
            self._blocks.move_to_end(block_id)
        return text

    def prompt(self, row: int) -> str:
        """Row `row`'s prompt: its blocks (the last cut to its length), or words of its own."""
        length = int(self.inputs[row])
        ids = self.hash_ids[row] if self.hash_ids is not None else ()
        if self.tokenizer is not None:
            rng = np.random.default_rng([self.seed, 7, row])
            tokens = np.concatenate([self._block(b) for b in ids]) if ids else \
                rng.choice(self.tokenizer.word_ids(), length)
            return self.tokenizer.text_of(tokens[:length], length, rng)[0]
        if not ids:
            rng = np.random.default_rng([self.seed, 7, row])
            return " ".join([WORDS[i] for i in rng.integers(0, len(WORDS), length).tolist()])
        parts = [self._block(b) for b in ids]
        tail = length - TRACE_BLOCK_TOKENS * (len(ids) - 1)
        if 0 < tail < TRACE_BLOCK_TOKENS:
            parts[-1] = " ".join(parts[-1].split(" ", tail)[:tail])
        elif tail <= 0:  # fewer tokens than its blocks: the leading words of them
            return " ".join(" ".join(parts).split(" ", length)[:length])
        return " ".join(parts)

    def build(self, row: int) -> Build:
        """Row `row`'s body in pieces: each of its blocks not cached yet (TRACE_BLOCK_TOKENS tokens), then the body
        (its prompt's tokens); returns the body."""
        ids = self.hash_ids[row] if self.hash_ids is not None else ()
        # (at most half the cache: a row of more blocks than that makes the rest with its body)
        for block_id in [b for b in dict.fromkeys(ids) if b not in self._blocks][:BLOCK_CACHE // 2]:
            yield Piece("trace block", TRACE_BLOCK_TOKENS)
            self._block(block_id)
        yield Piece("trace body", max(1, int(self.inputs[row])))
        return self._joined(row, ids) or self[row]

    def _joined(self, row: int, ids: tuple[int, ...]) -> bytes | None:
        """Row `row`'s body joined from its blocks as they stand in JSON (a copy, not a new text and its encoding:
        a 100k-token body is then a fraction of a millisecond's piece); None where it is not made of whole cached
        text blocks, or its blocks are more than its length."""
        length = int(self.inputs[row])
        tail = length - TRACE_BLOCK_TOKENS * (len(ids) - 1)
        if self.tokenizer is not None or not ids or tail <= 0 or any(b not in self._escaped for b in ids):
            return None
        parts = [self._escaped[b] for b in ids]
        if tail < TRACE_BLOCK_TOKENS:
            last = self._blocks[ids[-1]]
            parts[-1] = _escaped(" ".join(last.split(" ", tail)[:tail]))
        template = request_body(self.endpoint.protocol, self.endpoint.model, PROMPT_MARK, int(self.outputs[row]),
                                self.spec.ignore_eos, self.spec.stream, min_tokens=self.spec.min_tokens,
                                model_inputs=self.model_inputs, extra=body_extra(self.endpoint.protocol, self.spec))
        head, mark, end = template.partition(_escaped(PROMPT_MARK))
        return b"".join((head, b" ".join(parts), end)) if mark else None

    def __getitem__(self, row: int) -> bytes:
        return request_body(self.endpoint.protocol, self.endpoint.model, self.prompt(row), int(self.outputs[row]),
                            self.spec.ignore_eos, self.spec.stream, min_tokens=self.spec.min_tokens,
                            model_inputs=self.model_inputs, extra=body_extra(self.endpoint.protocol, self.spec))

    def facts(self, row: int) -> tuple[int, int]:
        """(the prompt's length as built, what an unbounded prefix cache would hold of it; -1: not known)."""
        return int(self.inputs[row]), int(self.ideal[row]) if self.ideal is not None else -1


def _escaped(text: str) -> bytes:
    """`text` as it stands inside a JSON string (escaping is per character: the escapes of parts join into the
    escape of their join)."""
    return orjson.dumps(text)[1:-1]


def ideal_cached(inputs: np.ndarray, hash_ids: list[tuple[int, ...]], order: np.ndarray) -> np.ndarray:
    """Per row, the prompt tokens an unbounded cache would hold when it is sent in `order` (the replay's rows, in
    the order of their sends): its leading blocks some earlier row had, in whole cache blocks, less than the
    prompt. A row sent again (a looped replay) keeps its first figure."""
    seen: set[int] = set()
    out = np.full(len(inputs), -1, dtype=np.int64)
    for row in order.tolist():
        ids = hash_ids[row]
        if out[row] < 0:
            run = 0
            for b in ids:
                if b not in seen:
                    break
                run += 1
            tokens = min(run * TRACE_BLOCK_TOKENS, int(inputs[row]) - 1)
            out[row] = max(0, tokens) // BLOCK_TOKENS * BLOCK_TOKENS
        seen.update(ids)
    return np.where(out < 0, 0, out)
