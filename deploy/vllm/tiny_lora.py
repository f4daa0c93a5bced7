"""Tiny seeded LoRA adapters for the tiny Llama of tiny_model.py, made offline with PEFT (Hugging Face's adapter
library): rank 4 on the attention's q and v projections, random weights from a seed (so two adapters really change
the model differently). vLLM serves them beside the base model (`--enable-lora --lora-modules NAME=DIR`). Runs in the
vLLM virtualenv (peft, torch, transformers).

    python deploy/vllm/tiny_lora.py OUT_DIR BASE_MODEL_DIR NAME [NAME …]
"""
from __future__ import annotations

import sys
from pathlib import Path

SEED = 20261129


def build(out: Path, base: Path, names: list[str]) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    for k, name in enumerate(names):
        target = out / name
        if (target / "adapter_config.json").exists():
            continue
        torch.manual_seed(SEED + k)
        model = LlamaForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
        config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                            task_type="CAUSAL_LM")
        get_peft_model(model, config).save_pretrained(target)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: tiny_lora.py OUT_DIR BASE_MODEL_DIR NAME [NAME …]")
    build(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
