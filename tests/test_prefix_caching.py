"""Prefix caching end to end on a tiny random model: same greedy output, fewer tokens.

Every scenario runs with caching on and off and must produce identical greedy
tokens; the cache must also have actually been used (hits > 0), so a test can
not pass by never hitting.
"""

from __future__ import annotations

import random

import pytest

from specdec import LLM, SamplingParams
from specdec.hookspecs import hookimpl

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


def make_llm(model_dir, caching: bool, **kwargs) -> LLM:
    kwargs.setdefault("num_kv_blocks", 256)  # a small pool is quick to allocate
    return LLM(model=str(model_dir), dtype="float32", enable_prefix_caching=caching, **kwargs)


def shared_prefix_prompts(n: int, prefix_len: int = 70, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    prefix = [rng.randrange(100, 5000) for _ in range(prefix_len)]
    tails = [[rng.randrange(100, 5000) for _ in range(rng.randint(3, 20))] for _ in range(n)]
    return [prefix + tail for tail in tails]


def run_both(model_dir, rounds: list[list[list[int]]], params=GREEDY, **kwargs):
    """Generate ``rounds`` (lists of prompts, one ``generate`` call each) with caching
    on and off; assert the tokens agree; return the caching-on LLM and outputs."""
    results = {}
    for caching in (False, True):
        llm = make_llm(model_dir, caching, **kwargs)
        outs = [o for prompts in rounds for o in llm.generate(prompts, params, use_tqdm=False)]
        results[caching] = (llm, outs)
    off, on = results[False][1], results[True][1]
    assert [o.token_ids for o in on] == [o.token_ids for o in off]
    assert all(o.finish_reason == "length" for o in on)
    return results[True]


def test_single_request_hits_on_repeat(tiny_model_dir):
    prompt = shared_prefix_prompts(1)[0]
    llm, outs = run_both(tiny_model_dir, [[prompt], [prompt]])
    assert outs[0].metrics.num_cached_tokens == 0
    assert outs[1].metrics.num_cached_tokens == (len(prompt) - 1) // 16 * 16


def test_batched_requests_share_the_prefix(tiny_model_dir):
    prompts = shared_prefix_prompts(8)
    llm, outs = run_both(tiny_model_dir, [prompts])
    # The first request caches the prefix when scheduled; the others, admitted in the
    # same step, read it after the forward wrote it.
    assert [o.metrics.num_cached_tokens for o in outs[1:]] == [64] * 7
    stats = llm.stats()
    assert stats["prefix_cache_queries"] == sum(len(p) for p in prompts)
    assert stats["prefix_cache_hits"] == sum(o.metrics.num_cached_tokens for o in outs)
    assert stats["forward_tokens"] < sum(len(p) for p in prompts)


def test_eviction_pressure_with_a_tiny_pool(tiny_model_dir):
    prompts = shared_prefix_prompts(10, prefix_len=40, seed=1)
    llm, outs = run_both(
        tiny_model_dir, [prompts[:5], prompts[5:], prompts[:3]], num_kv_blocks=12, max_num_seqs=4
    )
    stats = llm.stats()
    assert stats["preemptions"] > 0 and stats["prefix_cache_readmission_hits"] > 0
    assert stats["prefix_cache_evictions"] > 0
    assert stats["prefix_cache_hits"] > 0
    assert stats["kv_blocks_free"] == 12


def test_chunked_prefill(tiny_model_dir):
    prompts = shared_prefix_prompts(4, prefix_len=90, seed=2)
    llm, outs = run_both(
        tiny_model_dir,
        [prompts[:1], prompts],
        max_num_batched_tokens=32,
        long_prefill_token_threshold=16,
    )
    assert all(o.metrics.num_cached_tokens >= 80 for o in outs[1:])


class EchoDrafter:
    """Proposes the request's last three tokens again: some drafts are accepted,
    most are rejected, so blocks fill with drafts that must never be cached."""

    name = "echo_drafter"

    @hookimpl
    def specdec_schedule(self, requests):
        for req in requests:
            req.draft_token_ids = req.all_token_ids[-3:]


def test_speculative_drafts_are_not_cached(tiny_model_dir):
    prompts = shared_prefix_prompts(4, prefix_len=40, seed=3)
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    plain = make_llm(tiny_model_dir, False).generate(prompts, params, use_tqdm=False)
    llm, outs = run_both(
        tiny_model_dir, [prompts, prompts], params=params, plugins=[EchoDrafter()]
    )
    assert [o.token_ids for o in outs[:4]] == [o.token_ids for o in plain]
    # The second round re-finds prompt + verified output blocks of the first round.
    assert llm.stats()["prefix_cache_hits"] > 0


def test_abort_mid_prefill_keeps_what_was_computed(tiny_model_dir):
    prompt = shared_prefix_prompts(1, prefix_len=100, seed=4)[0]
    ref = make_llm(tiny_model_dir, False).generate(prompt, GREEDY, use_tqdm=False)[0]
    llm = make_llm(tiny_model_dir, True, max_num_batched_tokens=32)
    req = llm.engine.add_request(prompt, GREEDY)
    llm.engine.step()
    llm.engine.step()
    llm.engine.abort(req.request_id)
    out = llm.generate(prompt, GREEDY, use_tqdm=False)[0]
    assert out.metrics.num_cached_tokens == 64
    assert out.token_ids == ref.token_ids
    assert llm.stats()["kv_blocks_free"] == llm.stats()["kv_blocks_total"]


def test_multi_turn_chat_reuses_the_first_turns_blocks(tiny_model_dir):
    llm = make_llm(tiny_model_dir, True)
    engine = llm.engine
    conversation = [
        {"role": "system", "content": "You are a terse assistant. " * 8},
        {"role": "user", "content": "Name three prime numbers."},
    ]
    prompt1 = llm.apply_chat_template(conversation)
    first = engine.add_request(prompt1, GREEDY)
    turn1_blocks: list[int] = []
    while engine.has_unfinished():
        turn1_blocks = engine.kv.block_ids(first.request_id) or turn1_blocks
        engine.step()
    answer = first.output_token_ids

    conversation += [
        {"role": "assistant", "content": llm.tokenizer.decode(answer, skip_special_tokens=True)},
        {"role": "user", "content": "And three more?"},
    ]
    prompt2 = llm.apply_chat_template(conversation)
    second = engine.add_request(prompt2, GREEDY)
    engine.step()
    # Turn 1 cached its prompt and every output token it computed (all but the last).
    computed1 = prompt1 + answer[:-1]
    common = next(
        (i for i, (a, b) in enumerate(zip(computed1, prompt2, strict=False)) if a != b),
        min(len(computed1), len(prompt2)),
    )
    expected_blocks = min(common, len(prompt2) - 1) // 16
    assert expected_blocks >= len(prompt1) // 16 > 0
    assert second.num_cached_prompt_tokens == expected_blocks * 16
    assert engine.kv.block_ids(second.request_id)[:expected_blocks] == turn1_blocks[
        :expected_blocks
    ]


def test_cache_salt_isolates_tenants(tiny_model_dir):
    llm = make_llm(tiny_model_dir, True)
    prompt = shared_prefix_prompts(1)[0]

    def cached(**options) -> int:
        return llm.generate(prompt, GREEDY, use_tqdm=False, **options)[0].metrics.num_cached_tokens

    assert cached(cache_salt="tenant-a") == 0
    assert cached(cache_salt="tenant-b") == 0
    assert cached() == 0
    full = (len(prompt) - 1) // 16 * 16
    assert cached(cache_salt="tenant-a") == full
    assert cached() == full
    with pytest.raises(ValueError, match="cache_salt"):
        cached(cache_salt=7)


def test_disabled_installs_nothing_but_accepts_the_salt(tiny_model_dir):
    llm = make_llm(tiny_model_dir, False)
    assert llm.engine.kv.prefix_cache is None
    prompt = shared_prefix_prompts(1)[0]
    outs = [llm.generate(prompt, GREEDY, use_tqdm=False, cache_salt="t")[0] for _ in range(2)]
    assert outs[1].metrics.num_cached_tokens == 0
    assert "prefix_cache_hits" not in llm.stats()
