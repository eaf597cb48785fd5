"""Greedy output must match HF transformers token for token in float32."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from specdec import LLM, SamplingParams
from tests.conftest import make_tiny_model_dir

PROMPTS = [
    "The quick brown fox",
    "Extract the name and age as JSON: Ann is 31 and lives in Paris with her two cats.",
    "1, 2, 3, 4,",
    "Once upon a time, in a land far away, there lived a programmer who wrote paged attention "
    "kernels for fun and profit, and every evening",
]


def hf_greedy(model_dir, tokenizer, prompt: str, max_new: int) -> list[int]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, do_sample=False,
            eos_token_id=None, pad_token_id=0, min_new_tokens=max_new,
        )
    return out[0, ids.shape[1] :].tolist()


def specdec_greedy(llm: LLM, prompts: list[str], max_new: int) -> list[list[int]]:
    params = SamplingParams(max_tokens=max_new, temperature=0.0, ignore_eos=True)
    return [o.token_ids for o in llm.generate(prompts, params, use_tqdm=False)]


@pytest.fixture(scope="module", params=["llama", "mistral", "qwen2"])
def tiny_family(request, tmp_path_factory, tokenizer):
    path = make_tiny_model_dir(tmp_path_factory.mktemp(request.param), tokenizer, request.param)
    refs = [hf_greedy(path, tokenizer, p, 24) for p in PROMPTS]
    return path, refs


@pytest.mark.parametrize(
    "engine_kwargs",
    [
        {},  # whole batch at once
        {"max_num_batched_tokens": 7},  # chunked prefill forced
        {"long_prefill_token_threshold": 5},
        {"num_kv_blocks": 16, "block_size": 4},  # preemption forced
        {"max_num_seqs": 1},
        {"fused_kernels": False},  # the eager PyTorch path
        {"fused_kernels": False, "max_num_batched_tokens": 7},
    ],
    ids=["batched", "chunked", "threshold", "preempt", "serial", "eager", "eager-chunked"],
)
def test_tiny_models_match_hf(tiny_family, engine_kwargs):
    path, refs = tiny_family
    llm = LLM(model=str(path), dtype="float32", enable_prefix_caching=False, **engine_kwargs)
    assert specdec_greedy(llm, PROMPTS, 24) == refs
    if "num_kv_blocks" in engine_kwargs:
        assert llm.stats()["preemptions"] > 0
    assert llm.stats()["kv_blocks_free"] == llm.stats()["kv_blocks_total"]


def test_single_request_matches_hf(tiny_family):
    path, refs = tiny_family
    llm = LLM(model=str(path), dtype="float32")
    for prompt, ref in zip(PROMPTS, refs, strict=True):
        assert specdec_greedy(llm, [prompt], 24) == [ref]


@pytest.mark.slow
def test_smollm2_matches_hf(real_model_dir, tokenizer):
    chat = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        for p in PROMPTS
    ]
    refs = [hf_greedy(real_model_dir, tokenizer, p, 32) for p in chat]
    llm = LLM(dtype="float32", quantization="none", max_num_batched_tokens=64)  # chunked too
    assert specdec_greedy(llm, chat, 32) == refs
    llm = LLM(dtype="float32", quantization="none", num_kv_blocks=12, block_size=16)  # preempts
    assert specdec_greedy(llm, chat, 32) == refs
    assert llm.stats()["preemptions"] > 0
