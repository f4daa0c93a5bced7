"""A tiny random-weight vision-language model (LLaVA: a CLIP vision tower of 2 layers, 56-pixel images in 14-pixel
patches — 16 image tokens an image —, a 2-layer Llama), built offline into a Hugging Face cache directory under the
name `tailrace/tiny-vlm`, so that `transformers serve` lists and loads it with no network. Its tokenizer is
deploy/vllm/tiny_model.py's word-level one plus an `<image>` token; its chat template renders an image part as
`<image>`, which the processor expands into the image's tokens. Runs in the vLLM virtualenv.

    python deploy/vllm/tiny_vlm.py CACHE_DIR
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_model import SEED, words  # noqa: E402 - this script's own sibling

REPO_ID = "tailrace/tiny-vlm"
REVISION = "0" * 40
IMAGE_PIXELS, PATCH_PIXELS = 56, 14
TEMPLATE = ("{% for m in messages %}{{ m['role'] }} : {% if m['content'] is string %}{{ m['content'] }}"
            "{% else %}{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }} "
            "{% else %}<image> {% endif %}{% endfor %}{% endif %} {% endfor %}"
            "{% if add_generation_prompt %}assistant : {% endif %}")


def snapshot(cache: Path) -> Path:
    """Where the model's files go in a Hugging Face cache (refs/main names the snapshot)."""
    repo = cache / f"models--{REPO_ID.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    return repo / "snapshots" / REVISION


def build(cache: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    out = snapshot(cache)
    out.mkdir(parents=True, exist_ok=True)
    vocabulary = words()
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(vocab_size=len(vocabulary) + 200, min_frequency=1,
                                        special_tokens=["<unk>", "<s>", "</s>", "<pad>", "<image>"])
    corpus = [" ".join(vocabulary[i:i + 40]) for i in range(0, len(vocabulary), 40)]
    corpus += ["user assistant system : hello there world the a and of to in is"] * 4
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", extra_special_tokens={"image_token": "<image>"})
    fast.chat_template = TEMPLATE
    size = {"height": IMAGE_PIXELS, "width": IMAGE_PIXELS}
    images = CLIPImageProcessor(size={"shortest_edge": IMAGE_PIXELS}, crop_size=size)
    LlavaProcessor(image_processor=images, tokenizer=fast, patch_size=PATCH_PIXELS,
                   vision_feature_select_strategy="default", num_additional_image_tokens=1,  # the CLS token
                   chat_template=TEMPLATE).save_pretrained(out)
    torch.manual_seed(SEED)
    text = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=128, intermediate_size=256,
                       num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                       bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    vision = CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                              image_size=IMAGE_PIXELS, patch_size=PATCH_PIXELS, projection_dim=64)
    config = LlavaConfig(vision_config=vision, text_config=text, vision_feature_select_strategy="default",
                         image_token_index=fast.convert_tokens_to_ids("<image>"), vision_feature_layer=-1)
    LlavaForConditionalGeneration(config).save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    build(Path(sys.argv[1]))
