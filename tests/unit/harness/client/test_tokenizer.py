"""The profile's tokenizer: synthetic prompts of exact token lengths (word-level and byte-level BPE tokenizers
trained here on a generated corpus), token counts where the server reports none, and bad tokenizer files."""
from __future__ import annotations

import numpy as np
import pytest

from tailrace.contract.profile import Endpoint, Prompts, TokenCount
from tailrace.harness.client.generative import stream_into
from tailrace.harness.client.outcome import StreamOutcome
from tailrace.harness.client.streams.openai_stream import OpenAIStream
from tailrace.harness.client.tokenizer import load_tokenizer
from tailrace.harness.workload.prompts import PromptFileError, prompt_bodies, prompt_items, synthetic_prompts, token_counter

CORPUS = [" ".join(np.random.default_rng(i).choice(
    "the river stone cloud garden window letter music paper market signal engine bridge walking talked ran "
    "quickly slowly bright dark tokenizer prefix serving latency".split(), 40)) for i in range(400)]


def _write(tmp_path, kind: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if kind == "word":
        tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        trainer = trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"])
    else:  # byte-level BPE, GPT-2's scheme: a word's pieces merge and split at boundaries
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    path = tmp_path / f"{kind}-tokenizer.json"
    tok.save(str(path))
    return path


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_synthetic_prompts_have_exactly_the_token_lengths_asked(tmp_path, kind):
    tokenizer = load_tokenizer(str(_write(tmp_path, kind)))
    spec = Prompts(input_tokens=TokenCount(mean=60, distribution="uniform", min=5, max=120), count=40,
                   prefix_tokens=16, prefix_count=2)
    prompts = synthetic_prompts(spec, 3, tokenizer)
    asked = np.clip(np.rint(np.random.default_rng(3).integers(5, 121, 40)), 5, 120)
    assert [tokenizer.count(p) for p, _ in prompts] == [max(int(k), 16) for k in asked]
    assert prompts == synthetic_prompts(spec, 3, tokenizer)  # the same on every worker
    assert prompts[0][0][:16] == prompts[2][0][:16] != prompts[1][0][:16]  # prefixes in turn


def test_a_record_gets_token_counts_from_the_tokenizer_where_the_server_gives_no_usage(tmp_path):
    path = _write(tmp_path, "word")
    ep = Endpoint(name="g", url="http://h:1", protocol="openai-completions", model="m",
                  prompts={"tokenizer": str(path), "input_tokens": {"mean": 7}, "count": 3})
    items = prompt_items(ep, 1, tmp_path)
    counter = token_counter(ep, items, tmp_path)
    assert counter.input_tokens == [7, 7, 7]
    stream = OpenAIStream(chat=False)
    for i, text in enumerate(["the river", " stone", " cloud garden window", ""]):  # a server without usage
        stream.feed(1000 + i, b'{"choices":[{"text":"%s","finish_reason":null}]}' % text.encode())
    result = StreamOutcome()
    stream_into(result, stream, counter, 1)
    assert (result.output_tokens, result.token_source, result.input_tokens) == (6, "tokenizer", 7)
    with_usage = OpenAIStream(chat=False)
    with_usage.feed(1, b'{"choices":[{"text":"the river","finish_reason":"length"}],'
                       b'"usage":{"prompt_tokens":9,"completion_tokens":2}}')
    result = StreamOutcome()
    stream_into(result, with_usage, counter, 0)
    assert (result.output_tokens, result.token_source, result.input_tokens) == (2, "usage", 9)  # the server's word


def test_a_tokenizer_file_that_is_missing_or_not_one_is_named(tmp_path):
    (tmp_path / "bad.json").write_text('{"not": "a tokenizer"}')
    for name, words in (("missing.json", "no such tokenizer file"), ("bad.json", "not a tokenizer.json")):
        ep = Endpoint(name="g", url="http://h:1", protocol="openai-chat", model="m",
                      prompts={"tokenizer": name, "count": 2})
        with pytest.raises(PromptFileError, match=rf"prompts.tokenizer: .*{name}.*{words}|prompts.tokenizer: "
                                                  rf".*{name}: {words}"):
            prompt_bodies(ep, 1, tmp_path)
