"""The bfloat16 engine (AMX tile projections and attention where the CPU has them)
against HF transformers in bfloat16: greedy tokens and their log-probabilities.

Token-for-token identity is asserted in float32 elsewhere; in bfloat16 the two
round differently, so this checks log-probabilities to a tolerance and greedy
choices wherever the reference's top two are clearly apart. The tolerance adds HF's
own spread: where torch's bf16 matmul depends on the number of rows (oneDNN capped at
AVX2), HF's incremental decode and its full forward differ by up to ~0.06 at a
position, and the engine may differ from the full forward by as much as HF does.

Runs at every instruction-set level the CPU has (``test_isa_levels.py``)."""

from __future__ import annotations

import pytest
import torch

from specdec import LLM, SamplingParams, kernels
from tests.conftest import make_tiny_model_dir


@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # qwen2: q|k|v bias
def test_bf16_engine_matches_hf_bf16(tmp_path, tokenizer, arch):
    from transformers import AutoModelForCausalLM

    # head_dim 32 and all projection sizes multiples of 32: the AMX kernels apply
    model_dir = make_tiny_model_dir(tmp_path, tokenizer, arch=arch, hidden_size=128,
                                    intermediate_size=256, sharpen=4.0, seed=3)
    llm = LLM(model=str(model_dir), dtype="bfloat16")
    k = kernels.load()
    if k is not None and k.has_tile_linear():
        assert llm.engine.runner.model.layers[0].self_attn.qkv_proj.tiles is not None
    prompts = ["The capital of France is", "1, 2, 3, 4,", "Hello there, my name", "x"]
    outs = llm.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0, logprobs=1),
                        use_tqdm=False)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    checked_choices = 0
    for out in outs:
        reference, incremental = hf_log_probs(hf, out.prompt_token_ids, out.token_ids)
        for i, token in enumerate(out.token_ids):
            ref = reference[i]
            hf_spread = abs(float(incremental[i][token] - ref[token]))
            assert out.logprobs[i][token] == pytest.approx(float(ref[token]),
                                                           abs=0.02 + hf_spread)
            top = ref.topk(2)
            if float(top.values[0] - top.values[1]) > 0.15:
                assert token == int(top.indices[0])
                checked_choices += 1
    assert checked_choices >= 16  # the comparison did not skip most steps


@torch.no_grad()
def hf_log_probs(hf, prompt: list[int], tokens: list[int]):
    """Log-probabilities at each generated position from HF's full forward over the
    whole sequence, and from its incremental (KV-cached) decode of the same tokens."""
    full = hf(torch.tensor([prompt + tokens])).logits[0].float().log_softmax(-1)
    full = full[len(prompt) - 1 : len(prompt) - 1 + len(tokens)]
    step = hf(torch.tensor([prompt]), use_cache=True)
    incremental = [step.logits[0, -1].float().log_softmax(-1)]
    for token in tokens[:-1]:
        step = hf(torch.tensor([[token]]), past_key_values=step.past_key_values, use_cache=True)
        incremental.append(step.logits[0, -1].float().log_softmax(-1))
    return full, incremental
