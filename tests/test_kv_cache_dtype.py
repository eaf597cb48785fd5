"""``kv_cache_dtype="float16"``: a float32 model's KV cache stored in half, on the eager
path (the fused kernels' float16 caches are tested with the kernels): the option's
validation, the pool's size, what the cache holds, and that attention sees K/V as stored
whether a prefill reads its own K/V, chunks or hits the prefix cache."""

from __future__ import annotations

import pytest
import torch

from specdec import LLM, SamplingParams, isa
from specdec.cli import build_parser, engine_kwargs
from specdec.config import EngineConfig
from specdec.model.builder import resolve_kv_cache_dtype

EAGER = {"dtype": "float32", "fused_kernels": False}
# 2**24 bytes: a whole number of the tiny model's 8 KiB float32 blocks.
MEMORY_GB = 1 / 64
PROMPT = list(range(1000, 1045))  # 45 tokens: two full blocks of 16 and a part


def make(model_dir, **kwargs) -> LLM:
    return LLM(model=str(model_dir), **{**EAGER, "enable_prefix_caching": False, **kwargs})


def greedy(llm: LLM, prompt: list[int]) -> tuple[list[int], list[dict[int, float]]]:
    """The greedy tokens and each position's top-5 log-probabilities (the sharpened tiny
    model's chosen token has a log-probability of about 0 either way)."""
    params = SamplingParams(max_tokens=12, temperature=0.0, logprobs=5, ignore_eos=True)
    out = llm.generate([prompt], params, use_tqdm=False)[0]
    return out.token_ids, out.logprobs


def test_config_rejects_unknown_values_and_non_float32_models():
    with pytest.raises(ValueError, match=r"kv_cache_dtype must be one of \('auto', 'float16'\)"):
        EngineConfig(kv_cache_dtype="int8")
    with pytest.raises(ValueError, match="kv_cache_dtype='float16'.*bfloat16.*2 bytes"):
        EngineConfig(dtype="bfloat16", kv_cache_dtype="float16")
    EngineConfig(dtype="float32", kv_cache_dtype="float16")
    EngineConfig(dtype="auto", kv_cache_dtype="float16")  # checked once "auto" is resolved


def test_resolved_cache_dtype():
    assert resolve_kv_cache_dtype("auto", torch.float32) is torch.float32
    assert resolve_kv_cache_dtype("auto", torch.bfloat16) is torch.bfloat16
    assert resolve_kv_cache_dtype("float16", torch.float32) is torch.float16
    with pytest.raises(ValueError, match="kv_cache_dtype"):  # dtype="auto" that took bf16
        resolve_kv_cache_dtype("float16", torch.bfloat16)


@pytest.mark.parametrize("argv", [["generate", "x"], ["serve"], ["bench", "latency"]],
                         ids=" ".join)
def test_flag_reaches_the_config(argv):
    from specdec.server.serve import engine_config

    args = build_parser().parse_args([*argv, "--dtype", "float32", "--kv-cache-dtype", "float16"])
    config = engine_config(args) if argv == ["serve"] else EngineConfig(**engine_kwargs(args))
    assert config.kv_cache_dtype == "float16"
    with pytest.raises(SystemExit):  # argparse refuses other values
        build_parser().parse_args([*argv, "--kv-cache-dtype", "int8"])


def test_float16_pool_holds_twice_the_blocks(tiny_model_dir):
    auto = make(tiny_model_dir, kv_cache_memory_gb=MEMORY_GB)
    half = make(tiny_model_dir, kv_cache_memory_gb=MEMORY_GB, kv_cache_dtype="float16")
    a, h = auto.stats(), half.stats()
    assert h["kv_blocks_total"] == 2 * a["kv_blocks_total"]
    assert (a["kv_cache_dtype"], h["kv_cache_dtype"]) == ("float32", "float16")
    assert a["dtype"] == h["dtype"] == "float32"
    assert h["kv_cache_bytes"] == a["kv_cache_bytes"] == 2**24
    assert "kv_cache_dtype=float16" in isa.engine_summary(h)  # the benches' engine line
    assert "kv_cache_dtype" not in isa.engine_summary(a)
    runner = half.engine.runner
    assert runner.dtype is torch.float32  # activations (and masks) stay float32
    assert all(cache.dtype is torch.float16 for cache in runner.kv_caches)


def test_float16_cache_holds_rounded_kv_and_logprobs_stay_close(tiny_model_dir):
    auto = make(tiny_model_dir, num_kv_blocks=16)
    half = make(tiny_model_dir, num_kv_blocks=16, kv_cache_dtype="float16")
    auto_tokens, auto_logprobs = greedy(auto, PROMPT)
    half_tokens, half_logprobs = greedy(half, PROMPT)
    assert half_tokens == auto_tokens
    diff = max(abs(a[t] - h[t]) for a, h in zip(auto_logprobs, half_logprobs, strict=True)
               for t in a)
    assert 0 < diff < 1e-2
    # Layer 0's K/V depend on the tokens alone: the half cache holds the float32 one rounded.
    exact, stored = auto.engine.runner.kv_caches[0], half.engine.runner.kv_caches[0]
    assert exact.abs().sum() > 0
    assert not torch.equal(exact.half().float(), exact)  # the rounding is not a no-op
    assert torch.equal(stored, exact.half())


def test_prompt_output_same_direct_chunked_and_after_a_prefix_hit(tiny_model_dir):
    """Attention sees K/V as stored: the one-step prefill (its own K/V, rounded), chunks
    reading earlier chunks from the cache and a prefix hit give the same output."""
    one_step = greedy(make(tiny_model_dir, kv_cache_dtype="float16"), PROMPT)
    chunked = make(tiny_model_dir, kv_cache_dtype="float16", max_num_batched_tokens=16,
                   long_prefill_token_threshold=16)
    assert greedy(chunked, PROMPT) == one_step
    cached = make(tiny_model_dir, kv_cache_dtype="float16", enable_prefix_caching=True)
    assert greedy(cached, PROMPT) == one_step
    assert greedy(cached, PROMPT) == one_step  # 32 of its tokens read from the cache
    assert cached.stats()["prefix_cache_hits"] > 0


def test_draft_model_cache_takes_the_engine_dtype(tiny_model_dir):
    llm = make(tiny_model_dir, kv_cache_dtype="float16",
               speculative={"method": "draft", "num_speculative_tokens": 3,
                            "draft_quantization": "none"})
    proposer = llm.engine.pm.get_plugin("speculative").proposer
    assert all(cache.dtype is torch.float16 for cache in proposer.runner.kv_caches)
    assert greedy(llm, PROMPT)[0] == greedy(make(tiny_model_dir, kv_cache_dtype="float16"),
                                            PROMPT)[0]
    assert llm.stats()["spec_acceptance_rate"] == 1.0  # the target as its own draft
