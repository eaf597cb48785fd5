"""A prompt's greedy output does not depend on what else runs with it: the same tokens
and bit-identical log-probabilities alone, in a batch of 16, with its prefill chunked,
after a prefix-cache hit, and with n-gram speculation verifying drafts.

Six engines: the bundled GGUF model on its quantized projections (whose per-row
arithmetic does not depend on the number of rows), the same with attention read in
partitions of 64 positions (merged per query) and with a float16 KV cache, a
model whose projections run one row at a time, which isolates the rest of the step
(attention over the paged cache, norms, RoPE, the LM head, sampling), dense bfloat16
with its default options (the fused kernels' batch-invariant projections, where they
run), and dense bfloat16 with ``batch_invariant=True`` on AMX tiles. Runs at every ISA
level the CPU has (``test_isa_levels.py``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specdec import LLM, SamplingParams, kernels
from specdec.bench.workload import chat_prompt_ids, extraction_prompts
from specdec.model import packed_linear

MAX_TOKENS = 20


class RowByRowLinear(nn.Module):
    """x W^T computed for each row alone: its result cannot depend on the batch."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.weight, self.bias = weight, bias
        self.out_features, self.in_features = weight.shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        y = torch.cat([F.linear(rows[i : i + 1], self.weight, self.bias)
                       for i in range(rows.shape[0])])
        return y.reshape(*x.shape[:-1], self.out_features)


def row_by_row(llm: LLM) -> LLM:
    model = llm.engine.model
    for layer in model.layers:
        for owner, name in ((layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj"),
                            (layer.mlp, "gate_up_proj"), (layer.mlp, "down_proj")):
            old = getattr(owner, name)
            setattr(owner, name, RowByRowLinear(old.weight, old.bias))
    model.lm_head = RowByRowLinear(model.embed_tokens.weight, None)
    model.tie_word_embeddings = False
    model._kernel_weights_cache = None
    llm.engine.runner.invariant_attention = True  # what batch_invariant=True would set
    return llm


def partitions_of_64(llm: LLM) -> LLM:
    """Attention read in partitions of 64 positions (512 by default, which these prompts
    fit in): every decode's and chunk's queries merge several partitions' results."""
    kernels.load().set_attention_partition(64)
    return llm


@pytest.fixture(autouse=True)
def default_partition():
    k = kernels.load()
    was = k.set_attention_partition(512) if k is not None else None
    yield
    if k is not None:
        k.set_attention_partition(was)


ENGINES = {
    "gguf": lambda **kw: LLM(quantization="gguf", **kw),
    "gguf-partitions-of-64": lambda **kw: partitions_of_64(LLM(quantization="gguf", **kw)),
    "gguf-f16-kv": lambda **kw: LLM(quantization="gguf", dtype="float32",
                                    kv_cache_dtype="float16", **kw),
    "row-by-row": lambda **kw: row_by_row(LLM(quantization="none", dtype="float32", **kw)),
    "bf16-invariant": lambda **kw: LLM(quantization="none", dtype="bfloat16", **kw),
    "bf16-amx-tiles": lambda **kw: LLM(quantization="none", dtype="bfloat16",
                                       batch_invariant=True, **kw),
}


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return chat_prompt_ids(tokenizer, extraction_prompts(16))


def greedy(llm: LLM, batch: list[list[int]]) -> list[tuple[list[int], list[float]]]:
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, logprobs=0,
                            ignore_eos=True)
    outs = llm.generate(batch, params, use_tqdm=False)
    return [(o.token_ids, [lp[t] for t, lp in zip(o.token_ids, o.logprobs, strict=True)])
            for o in outs]


@pytest.mark.slow
@pytest.mark.parametrize("engine", list(ENGINES))
def test_greedy_output_does_not_depend_on_the_batch(engine, prompts):
    skip_unless_runnable(engine)
    make = ENGINES[engine]
    llm = make(enable_prefix_caching=False)
    if engine == "bf16-invariant":  # by default, without batch_invariant=True
        assert llm.stats()["weight_layout"] == "bf16-invariant"
    if engine == "bf16-amx-tiles":
        assert llm.stats()["weight_layout"] == "amx-tiles-invariant"
    assert llm.stats()["batch_invariant"] is True
    alone = [greedy(llm, [p])[0] for p in prompts[:3]]
    batched = greedy(llm, prompts)[:3]
    assert batched == alone
    del llm

    chunked = make(enable_prefix_caching=False, max_num_batched_tokens=16)
    assert [greedy(chunked, [p])[0] for p in prompts[:3]] == alone
    del chunked

    cached = make(enable_prefix_caching=True)
    greedy(cached, [prompts[0][:-3] + [13, 13, 13]])  # shares all but the last blocks
    assert greedy(cached, [prompts[0]])[0] == alone[0]
    del cached

    speculative = make(enable_prefix_caching=False,
                       speculative={"method": "ngram", "num_speculative_tokens": 4})
    assert [greedy(speculative, [p])[0] for p in prompts[:3]] == alone
    stats = speculative.stats()
    assert stats["spec_num_draft_tokens"] > 0  # drafts were verified, not skipped


@pytest.mark.slow
@pytest.mark.parametrize("engine", list(ENGINES))
def test_long_queries_take_the_same_attention(engine, prompts):
    """Queries longer than the kernel's short-query sizes (a cache hit leaving 20..35
    tokens, 48-token chunks, a fresh prompt past 256 tokens) still give the output the
    prompt has alone: every query goes to the paged-attention kernel."""
    skip_unless_runnable(engine)
    make = ENGINES[engine]
    prompt = prompts[0]
    long_prompt = [t for p in prompts[:4] for t in p][:300]
    llm = make(enable_prefix_caching=False)
    alone, long_alone = greedy(llm, [prompt])[0], greedy(llm, [long_prompt])[0]
    assert greedy(llm, [long_prompt, *prompts[1:4]])[0] == long_alone
    del llm

    cached = make(enable_prefix_caching=True)
    shared = (len(prompt) - 20) // 16 * 16  # leaves 20..35 tokens to compute
    greedy(cached, [prompt[:shared] + [13, 13, 13]])
    assert greedy(cached, [prompt])[0] == alone
    del cached

    chunked = make(enable_prefix_caching=False, max_num_batched_tokens=48)
    assert greedy(chunked, [long_prompt])[0] == long_alone


def skip_unless_runnable(engine: str) -> None:
    if kernels.load() is None:  # eager PyTorch: SDPA's rounding depends on the query shape
        pytest.skip("batch invariance needs the fused kernels' paged attention")
    if engine.startswith("gguf") and not hasattr(kernels.load(), "gguf_formats"):
        pytest.skip("no fused kernels at this ISA level: GGUF weights are dequantized")
    if engine == "bf16-invariant" and not packed_linear.invariant_available(kernels.load()):
        pytest.skip("no batch-invariant bf16 kernel here (needs AVX-512 without AMX tiles)")
    if engine == "bf16-amx-tiles" and not (packed_linear.available()
                                           and kernels.load().has_tile_linear()):
        pytest.skip("no AMX tiles here")
