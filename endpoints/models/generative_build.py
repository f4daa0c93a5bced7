"""The embedded server's generative models, built deterministically without downloads:

- `tiny_lm`: a recurrent decoder step as ONNX (`1/decoder.onnx`), seeded weights, greedy. One step takes, for each
  sequence of the batch, a run of tokens (a prompt chunk in prefill, or the last generated token in decode), a mask
  and the sequence's state; it returns the next token (argmax of the logits) and the new state. Real compute per
  token; the same prompt always yields the same text.
- `synthetic_lm`: the same interface with known times (as `synthetic_mm1` is for one-shot requests): a step sleeps
  `step_ms + step_ms_per_seq × batch + prefill_ms_per_token × prompt tokens in the step`, so the server knows what
  TTFT and TPOT should be.

Both declare Triton-generate-shaped tensors (`text_input`, `max_tokens` → `text_output`) and the backend
`tailrace_generative`; `1/vocab.json` is the vocabulary (endpoints/models/vocabulary.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tailrace.contract.tensors import TensorSpec
from tailrace.endpoints.models.model_config import ModelSpec, write_config
from tailrace.endpoints.models.onnx_tools import onnx_parameter_count
from tailrace.endpoints.models.vocabulary import WordVocabulary

SEED = 20261126
GENERATIVE_BACKEND = "tailrace_generative"
TINY_LM, SYNTHETIC_LM = "tiny_lm", "synthetic_lm"
GENERATIVE_MODELS = (TINY_LM, SYNTHETIC_LM)
VOCAB_SIZE, HIDDEN = 512, 128
DECODER_FILE, VOCAB_FILE = "decoder.onnx", "vocab.json"
OPSET = 17
_INPUTS = (TensorSpec("text_input", "BYTES", (1,)), TensorSpec("max_tokens", "INT32", (1,)))
_OUTPUTS = (TensorSpec("text_output", "BYTES", (-1,)), TensorSpec("num_output_tokens", "INT32", (1,)))
# the defaults a model's config carries (tailrace serve's --max-num-seqs etc. override them)
SCHEDULING = {"max_num_seqs": "64", "max_num_batched_tokens": "2048", "max_waiting": "256", "max_model_len": "4096"}
SYNTHETIC_TIMES = {"step_ms": "8.0", "step_ms_per_seq": "0.1", "prefill_ms_per_token": "0.02"}


def decoder_graph(rng: np.random.Generator, vocab: int = VOCAB_SIZE, hidden: int = HIDDEN):
    """state' = tanh(Σ_t mask·E[token_t] · U + state · W); next = argmax(state' · O)."""
    from onnx import TensorProto, helper, numpy_helper

    embed = rng.normal(0, 1.0, (vocab, hidden)).astype(np.float32)
    from_input = rng.normal(0, 1.0 / np.sqrt(hidden), (hidden, hidden)).astype(np.float32)
    from_state = rng.normal(0, 1.0 / np.sqrt(hidden), (hidden, hidden)).astype(np.float32)
    out = rng.normal(0, 1.0, (hidden, vocab)).astype(np.float32)
    out[:, 0] -= 4.0  # EOS is rare: greedy text runs on unless ignore_eos is off and the state points at it
    inits = [numpy_helper.from_array(a, n) for a, n in ((embed, "E"), (from_input, "U"), (from_state, "W"), (out, "O"),
                                                        (np.array([2], np.int64), "axis2"),
                                                        (np.array([1], np.int64), "axis1"))]
    nodes = [
        helper.make_node("Gather", ["E", "tokens"], ["embedded"]),
        helper.make_node("Unsqueeze", ["mask", "axis2"], ["mask3"]),
        helper.make_node("Mul", ["embedded", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["summed"], keepdims=0),
        helper.make_node("MatMul", ["summed", "U"], ["from_input"]),
        helper.make_node("MatMul", ["state", "W"], ["from_state"]),
        helper.make_node("Add", ["from_input", "from_state"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["state_out"]),
        helper.make_node("MatMul", ["state_out", "O"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["next_token"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "tiny_lm_step",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", "steps"]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "steps"]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, ["batch", hidden])],
        [helper.make_tensor_value_info("next_token", TensorProto.INT64, ["batch"]),
         helper.make_tensor_value_info("state_out", TensorProto.FLOAT, ["batch", hidden])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tailrace")
    model.ir_version = 8
    return model


PROMPTS_JSONL = Path("_data") / "prompts.jsonl"
PROMPTS_SHAREGPT = Path("_data") / "sharegpt.json"


def write_prompt_sets(out: Path, words: list[str], n: int = 64, seed: int = SEED) -> None:
    """A small deterministic prompt set in both file formats tailrace reads: JSONL ({"prompt", "max_tokens"}, every
    fourth as chat messages) and ShareGPT (conversations of one to three exchanges, replies of known length)."""
    import json

    rng = np.random.default_rng(seed)

    def text(k: int) -> str:
        return " ".join(words[i] for i in rng.integers(1, len(words), k))

    lines, conversations = [], []
    for i in range(n):
        prompt, reply = int(rng.integers(8, 96)), int(rng.integers(4, 48))
        lines.append({"messages": [{"role": "system", "content": text(6)}, {"role": "user", "content": text(prompt)}],
                      "max_tokens": reply} if i % 4 == 3 else {"prompt": text(prompt), "max_tokens": reply})
        turns = []
        for _ in range(int(rng.integers(1, 4))):
            turns += [{"from": "human", "value": text(int(rng.integers(8, 64)))},
                      {"from": "gpt", "value": text(int(rng.integers(4, 48)))}]
        conversations.append({"id": f"conv-{i}", "conversations": turns})
    (out / PROMPTS_JSONL).parent.mkdir(parents=True, exist_ok=True)
    (out / PROMPTS_JSONL).write_text("".join(json.dumps(line) + "\n" for line in lines))
    (out / PROMPTS_SHAREGPT).write_text(json.dumps(conversations, indent=1))


def build_generative(out: Path, write_metadata) -> list:
    """Write tiny_lm and synthetic_lm into the repository `out` (and the prompt sets); `write_metadata` as
    model_build's."""
    vocab = WordVocabulary.build(VOCAB_SIZE)
    write_prompt_sets(out, vocab.words)
    built = []
    for name in GENERATIVE_MODELS:
        model_dir = out / name
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        vocab.write(model_dir / "1" / VOCAB_FILE)
        params = {"hidden": str(HIDDEN), **SCHEDULING}
        if name == TINY_LM:
            artifact = model_dir / "1" / DECODER_FILE
            artifact.write_bytes(decoder_graph(np.random.default_rng(SEED)).SerializeToString())
            params["decoder"] = "onnx"
            parameters = onnx_parameter_count(artifact)
            note = (f"recurrent decoder step (vocabulary {VOCAB_SIZE} words, hidden {HIDDEN}), seeded weights, "
                    "greedy; continuous batching in the embedded server")
        else:
            artifact = model_dir / "1" / VOCAB_FILE
            params |= {"decoder": "synthetic", **SYNTHETIC_TIMES}
            parameters = 0
            note = ("synthetic decoder: a step sleeps step_ms + step_ms_per_seq × batch + prefill_ms_per_token × "
                    "prompt tokens in the step (known TTFT and TPOT)")
        write_config(model_dir / "config.pbtxt", ModelSpec(
            name=name, backend=GENERATIVE_BACKEND, inputs=_INPUTS, outputs=_OUTPUTS, parameters=params, decoupled=True))
        built.append(write_metadata(model_dir, artifact, None, parameters, {"description": note}))
    return built
