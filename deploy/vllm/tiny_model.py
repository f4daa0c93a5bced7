"""A tiny random-weight causal LM in the Hugging Face layout vLLM reads, built offline: nothing is downloaded.

A LlamaForCausalLM (2 layers, hidden 128, 2 heads of 64 — the head size vLLM's CPU attention takes —, a 2048-token
context) with seeded random weights, and a word-level tokenizer trained with `tokenizers` on a generated corpus of
the embedded models' made-up words (so a prompt of k such words is about k tokens) and JSON's punctuation and
literals (so that guided decoding can spell JSON: "[ true , false ]"), saved with its chat template.
Runs in the vLLM virtualenv (transformers, torch, tokenizers come with vLLM).

    python deploy/vllm/tiny_model.py OUT_DIR
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

SEED = 20261126
CONSONANTS, VOWELS = "bdfgklmnprstvz", "aeiou"
VERSION = 2  # 2: JSON's tokens in the vocabulary (structured outputs)
JSON_TOKENS = ["{", "}", "[", "]", ",", '"', "true", "false", "null", *"0123456789", "-", "."]


def words(n: int = 1200) -> list[str]:
    syllables = [c + v for c in CONSONANTS for v in VOWELS]
    return [a + b for a in syllables for b in syllables][:n]


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    vocabulary = words()
    special = ["<unk>", "<s>", "</s>", "<pad>"]
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(vocab_size=len(vocabulary) + 200, special_tokens=special, min_frequency=1)
    corpus = [" ".join(vocabulary[i:i + 40]) for i in range(0, len(vocabulary), 40)]
    corpus += ["user assistant system : hello there world the a and of to in is"] * 4
    corpus += [" ".join(JSON_TOKENS)] * 4  # JSON's punctuation and literals: guided decoding can spell JSON
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
                          "{% if add_generation_prompt %}assistant : {% endif %}")
    fast.save_pretrained(out)
    torch.manual_seed(SEED)
    config = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=2048, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, tie_word_embeddings=False, torch_dtype="float32")
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    (out / "tailrace-model.json").write_text(json.dumps({"version": VERSION, "seed": SEED,
                                                         "vocabulary": tokenizer.get_vocab_size(),
                                                         "layers": 2, "hidden": 128, "head_dim": 64}))


if __name__ == "__main__":
    build(Path(sys.argv[1]))
