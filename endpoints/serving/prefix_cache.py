"""Automatic prefix caching for the continuous-batching engine, after vLLM's (docs/design/prefix_caching in vLLM):
a sequence's tokens are cut into full blocks of `block_size`; each block is named by the hash of its tokens chained
to its predecessor's, so one name stands for the whole prefix up to it. A new prompt reuses the longest leading run
of its blocks found in the cache (never the whole prompt: at least its last token is computed, as vLLM does, so a
first token comes from a step). The cache holds at most `capacity_blocks` blocks (the KV budget) and evicts the
least recently used; a hit refreshes the blocks it used. Counters are in tokens, as vLLM's
`prefix_cache_queries` / `prefix_cache_hits`.

Only the block names are kept: the engine's decoders either carry no KV state (synthetic_lm: prefill time is
charged per uncached token) or do not cache (tiny_lm's recurrent state; see Decoder.caches_prefix).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np


def block_names(tokens: Sequence[int], block_size: int, known: list[int] | None = None) -> list[int]:
    """The chained hash of every full block of `tokens`: names[i] stands for tokens[: (i + 1) · block_size].
    `known`: the names of its leading blocks already hashed (a request's prompt, when its reply is added): only the
    blocks after them are hashed. Within one server process the names are stable (the cache is the process's)."""
    raw = np.ascontiguousarray(tokens, dtype=np.int64)
    names = list(known or ())
    previous = names[-1] if names else 0
    step = block_size * 8
    data = raw.tobytes()
    for start in range(len(names) * step, len(raw) // block_size * step, step):
        previous = hash((previous, data[start:start + step]))
        names.append(previous)
    return names


class PrefixCache:
    """Full blocks of computed tokens, by chained hash, within a block budget, least recently used evicted first.
    Thread-safe: the engine thread looks up and inserts; the metrics read the counters."""

    def __init__(self, capacity_tokens: int, block_size: int = 16) -> None:
        if block_size < 1 or capacity_tokens < block_size:
            raise ValueError(f"the prefix cache needs kv_cache_tokens ≥ block_size ({block_size}), got "
                             f"{capacity_tokens}")
        self.block_size = block_size
        self.capacity_blocks = capacity_tokens // block_size
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()
        self.queries = 0  # prompt tokens looked up
        self.hits = 0  # of them, found cached
        self.evicted_blocks = 0

    def lookup(self, prompt: Sequence[int], names: list[int] | None = None) -> int:
        """How many leading tokens of `prompt` are cached (a whole number of blocks, less than the prompt); counts
        the query and the hit. `names`: block_names(prompt), when the caller keeps them."""
        usable = (len(prompt) - 1) // self.block_size  # the last token is always computed
        names = (block_names(prompt, self.block_size) if names is None else names)[:usable]
        with self._lock:
            found = 0
            for name in names:
                if name not in self._blocks:
                    break
                self._blocks.move_to_end(name)
                found += 1
            cached = found * self.block_size
            self.queries += len(prompt)
            self.hits += cached
        return cached

    def insert(self, names: list[int]) -> None:
        """Cache the blocks `names` (block_names of a computed sequence: its prompt, and the tokens it generated),
        evicting the least recently used blocks beyond the budget."""
        with self._lock:
            for name in names:
                if name in self._blocks:
                    self._blocks.move_to_end(name)
                else:
                    self._blocks[name] = None
            while len(self._blocks) > self.capacity_blocks:
                self._blocks.popitem(last=False)
                self.evicted_blocks += 1

    @property
    def blocks(self) -> int:
        return len(self._blocks)

    def usage(self) -> float:
        """The fraction of the block budget in use."""
        return len(self._blocks) / self.capacity_blocks
