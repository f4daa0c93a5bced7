"""Automatic prefix caching: block names chained from the first block, the leading run reused (never the last token),
a block budget with least-recently-used eviction, and the engine skipping the cached tokens' prefill with vLLM's
counters and usage."""
from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import generate_latest

from tailrace.endpoints.generation.chunks import usage
from tailrace.endpoints.serving.continuous import BatchingLimits, Generation
from tailrace.endpoints.serving.prefix_cache import PrefixCache, block_names
from tests.unit.endpoints.serving.test_continuous_batching import RecordingDecoder, engine, wait_done


def test_a_block_name_stands_for_its_whole_prefix():
    a, b = list(range(64)), list(range(64))
    b[3] = 999  # the first block differs: every later block's name differs too
    assert block_names(a, 16)[1:] != block_names(b, 16)[1:] and block_names(a, 16)[0] != block_names(b, 16)[0]
    assert len(block_names(list(range(47)), 16)) == 2  # full blocks only
    whole = block_names(list(range(80)), 16)
    assert block_names(list(range(80)), 16, whole[:2]) == whole  # continued from known leading blocks


def test_the_leading_run_of_cached_blocks_is_reused_but_never_the_last_token():
    cache = PrefixCache(capacity_tokens=1024, block_size=16)
    prompt = list(range(100))
    assert cache.lookup(prompt) == 0
    cache.insert(block_names(prompt + [7] * 20, 16))  # its prompt and its reply
    assert cache.lookup(prompt + [7] * 20 + [1, 2, 3]) == 112  # 7 full blocks of the 123-token prompt
    assert cache.lookup(prompt[:64]) == 48  # the whole prompt cached: its last block is computed again
    changed = [999] + prompt[1:]
    assert cache.lookup(changed) == 0  # only a leading run counts
    assert (cache.queries, cache.hits) == (100 + 123 + 64 + 100, 112 + 48)


def test_the_budget_evicts_the_least_recently_used_blocks():
    cache = PrefixCache(capacity_tokens=64, block_size=16)  # four blocks
    first, second = list(range(33)), list(range(1000, 1033))
    cache.insert(block_names(first, 16))  # 2 blocks
    cache.insert(block_names(second, 16))  # 2 more: full
    assert cache.lookup(first) == 32  # used: now the most recent
    cache.insert(block_names(list(range(2000, 2033)), 16))  # 2 more: the two least recently used (second's) go
    assert cache.lookup(first) == 32 and cache.lookup(second) == 0 and cache.evicted_blocks == 2
    with pytest.raises(ValueError, match="kv_cache_tokens"):
        PrefixCache(capacity_tokens=8, block_size=16)


class CachingDecoder(RecordingDecoder):
    caches_prefix = True


def test_the_engine_prefills_only_the_uncached_tokens_and_counts_them_as_vllm_does():
    decoder = CachingDecoder()
    batcher, published, registry = engine(decoder, max_num_batched_tokens=4096, block_size=16)
    try:
        first = Generation(np.arange(1, 41, dtype=np.int64), max_tokens=8, ignore_eos=True)
        batcher.submit(first)
        wait_done(first)
        second = Generation(np.concatenate([first.prompt, np.asarray(first.tokens), np.arange(100, 110)]),
                            max_tokens=4, ignore_eos=True)
        batcher.submit(second)
        wait_done(second)
    finally:
        batcher.stop()
    assert first.cached_tokens == 0 and second.cached_tokens == 48  # 40 + 8 computed: 3 whole blocks
    prefill_of_second = decoder.steps[-4]  # its prefill step fed only the uncached 10 tokens
    assert int(prefill_of_second.mask.sum()) == 58 - 48
    text = generate_latest(registry).decode()
    assert 'tailrace:prefix_cache_queries_total{model_name="m"} 98.0' in text
    assert 'tailrace:prefix_cache_hits_total{model_name="m"} 48.0' in text
    assert usage(58, 4, second.cached_tokens)["prompt_tokens_details"] == {"cached_tokens": 48}


def test_prefix_caching_off_or_a_decoder_that_cannot_reuse_state_never_caches():
    for decoder, on in ((CachingDecoder(), 0), (RecordingDecoder(), 1)):
        batcher, _, _ = engine(decoder, enable_prefix_caching=on)
        try:
            assert batcher.prefix_cache is None
        finally:
            batcher.stop()
    with pytest.raises(ValueError, match="enable_prefix_caching"):
        BatchingLimits.of({}, {"enable_prefix_caching": 2})
