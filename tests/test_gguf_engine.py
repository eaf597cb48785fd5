"""The bundled model on its GGUF blocks (``quantization="gguf"``) against the same
weights dequantized, in HF transformers float32: log-probabilities of the engine's
greedy tokens, teacher-forced, and the greedy choices where the reference's top two
are clearly apart. The projections quantize activations to int8 per 32 (llama.cpp's
method), so the tolerance is that of activation rounding: measured on SmolLM2, the
median |delta log-prob| is ~0.005 (bf16 dense weights: ~0.004) and the largest ~0.3
(bf16: ~0.15). Also: what the engine reports about its weights.

Runs at every ISA level the CPU has (``test_isa_levels.py``)."""

from __future__ import annotations

import statistics

import pytest
import torch

from specdec import LLM, SamplingParams, kernels
from specdec.bench.workload import chat_prompt_ids, extraction_prompts

pytestmark = pytest.mark.skipif(not hasattr(kernels.load(), "gguf_formats"),
                                reason="no fused kernels at this ISA level")


@pytest.fixture(scope="module")
def hf_float32(real_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(real_model_dir, dtype=torch.float32)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gguf_engine_matches_the_dequantized_model(hf_float32, dtype):
    llm = LLM(quantization="gguf", dtype=dtype)
    prompts = chat_prompt_ids(llm.tokenizer, extraction_prompts(4) + [
        "Write a haiku about the sea.", "What is 17 * 23?"])
    outs = llm.generate(prompts, SamplingParams(max_tokens=24, temperature=0.0, logprobs=0),
                        use_tqdm=False)
    deltas, checked = [], 0
    for out in outs:
        ids = out.prompt_token_ids + out.token_ids
        with torch.no_grad():
            logits = hf_float32(torch.tensor([ids])).logits[0].float()
        reference = logits.log_softmax(-1)[len(out.prompt_token_ids) - 1 : -1]
        for i, token in enumerate(out.token_ids):
            deltas.append(abs(out.logprobs[i][token] - float(reference[i][token])))
            top = reference[i].topk(2)
            if float(top.values[0] - top.values[1]) > 0.5:
                assert token == int(top.indices[0]), (out.prompt_token_ids, i)
                checked += 1
    assert statistics.median(deltas) < 0.012
    assert max(deltas) < 0.5
    assert checked >= 60  # most steps were compared, not skipped


def test_gguf_weights_are_reported_and_smaller():
    llm = LLM(quantization="gguf", max_num_seqs=2)
    stats = llm.stats()
    assert stats["weight_layout"] == "gguf-Q4_1+gguf-Q8_0"
    assert stats["batch_invariant"] is True
    # 30 layers of Q4_1 projections (~66 MB) + the Q8_0 head (~30 MB) + the Q8_0
    # embedding (~30 MB, looked up in place) + norms.
    assert 110 * 2**20 < stats["weight_bytes"] < 135 * 2**20
    # The non-temporal hint is reported where it applies: GGUF weights, kernels on.
    assert stats["nontemporal_weights"] is (llm.engine.kernels is not None
                                            and kernels.nontemporal_weights())
    del llm
    dense = LLM(quantization="none", dtype="float32", max_num_seqs=2)
    assert dense.stats()["weight_bytes"] > 4 * stats["weight_bytes"]
    assert dense.stats()["batch_invariant"] is False
    assert dense.stats()["nontemporal_weights"] is False


def test_gguf_needs_a_gguf_file(tiny_model_dir):
    with pytest.raises(ValueError, match="quantization='gguf' needs a .gguf model file"):
        LLM(model=str(tiny_model_dir), quantization="gguf")
    with pytest.raises(ValueError, match="quantization must be one of"):
        LLM(model=str(tiny_model_dir), quantization="int4")
