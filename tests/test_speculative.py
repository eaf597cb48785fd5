"""Speculative decoding: exact verification, n-gram proposals, greedy identity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec import LLM, SamplingParams
from specdec.core.request import Request
from specdec.sample.logits_rows import LogitsRow
from specdec.sample.sampler import Sampler
from specdec.speculative.ngram import TokenHistory, propose_ngram


def total_variation(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a / a.sum() - b / b.sum()).sum())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rejection_sampling_keeps_target_distribution(seed):
    """Draft x ~ q, verify against p: the kept token must be distributed as p."""
    g = torch.Generator().manual_seed(seed)
    vocab, n = 6, 20000
    p = torch.softmax(torch.randn(vocab, generator=g) * 2, -1)
    q = torch.softmax(torch.randn(vocab, generator=g) * 2, -1)
    sampler = Sampler(seed=seed)
    req = Request("r", None, [1], SamplingParams(temperature=1.0))
    req.generator = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(q, n, replacement=True, generator=g).tolist()
    counts = np.zeros(vocab)
    accepted = 0
    for x in drafts:
        tok = sampler._verify(p.clone(), LogitsRow(req, 0, [], x, q))
        counts[tok] += 1
        accepted += tok == x
    assert total_variation(counts, p.numpy()) < 0.02
    expected_accept = float(torch.minimum(p, q).sum())  # sum_x min(p(x), q(x))
    assert abs(accepted / n - expected_accept) < 0.02
    # Negative control: the draft distribution itself is measurably different.
    assert total_variation(q.numpy(), p.numpy()) > 0.05


def test_ngram_proposes_continuation_of_longest_recent_match():
    tokens = np.array([1, 2, 3, 4, 5, 9, 2, 3, 4, 6, 7, 1, 2, 3], dtype=np.int32)
    # suffix [1, 2, 3] matches at 0..2 (length 3) beats [2, 3] at 6..7 (length 2)
    assert propose_ngram(tokens, 3, 2, 4) == [4, 5, 9]
    assert propose_ngram(tokens, 3, 4, 4) == []  # no earlier 4-gram match
    assert propose_ngram(np.array([5, 6, 7], dtype=np.int32), 3, 1, 3) == []


def test_token_history_grows_incrementally():
    hist = TokenHistory([1, 2])
    out = [3]
    assert hist.sync([1, 2], out).tolist() == [1, 2, 3]
    out += list(range(4, 40))
    assert hist.sync([1, 2], out).tolist() == [1, 2, 3] + list(range(4, 40))


REPETITIVE = [
    "a b c d e f g a b c d e f g a b c d e f g a b c",
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the",
    "1 2 3 4 1 2 3 4 1 2 3 4 1 2",
]


@pytest.mark.parametrize("engine_kwargs", [{}, {"num_kv_blocks": 14, "block_size": 4},
                                           {"max_num_batched_tokens": 9}])
def test_greedy_output_identical_with_ngram_speculation(tiny_model_dir, engine_kwargs):
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    base = LLM(model=str(tiny_model_dir), dtype="float32", enable_prefix_caching=False,
               **engine_kwargs)
    spec = LLM(model=str(tiny_model_dir), dtype="float32", enable_prefix_caching=False,
               speculative={"method": "ngram", "num_speculative_tokens": 4,
                            "prompt_lookup_min": 1, "prompt_lookup_max": 3},
               **engine_kwargs)
    ref = [o.token_ids for o in base.generate(REPETITIVE, params, use_tqdm=False)]
    got = [o.token_ids for o in spec.generate(REPETITIVE, params, use_tqdm=False)]
    assert got == ref
    stats = spec.stats()
    assert stats["spec_num_draft_tokens"] > 0 and stats["spec_num_accepted_tokens"] > 0
    assert stats["steps"] < base.stats()["steps"]  # fewer forwards for the same tokens
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]


def test_per_request_opt_out_and_policy(tiny_model_dir):
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    spec = LLM(model=str(tiny_model_dir), dtype="float32",
               speculative={"method": "ngram", "prompt_lookup_min": 1,
                            "max_speculative_tokens": 10})
    spec.generate(REPETITIVE[0], params, use_tqdm=False, speculative=False)
    assert spec.stats()["spec_num_draft_tokens"] == 0
    spec.generate(REPETITIVE * 4, params, use_tqdm=False)  # 12 requests * (k+1) > 10
    assert spec.stats()["spec_requests_skipped_by_policy"] > 0


def test_bad_speculative_config(tiny_model_dir):
    with pytest.raises(ValueError, match="speculative method must be one of"):
        LLM(model=str(tiny_model_dir), speculative={"method": "magic"})
    with pytest.raises(ValueError, match="unknown speculative option"):
        LLM(model=str(tiny_model_dir), speculative={"method": "ngram", "k": 3})


def draft_llm(target_dir, draft_dir, **kwargs):
    return LLM(model=str(target_dir), dtype="float32", enable_prefix_caching=False,
               speculative={"method": "draft", "model": str(draft_dir),
                            "num_speculative_tokens": 3, "draft_quantization": "none",
                            "max_speculative_tokens": 1024},
               **kwargs)


def test_draft_model_greedy_identical_and_self_draft_accepts_all(tiny_model_dir, tmp_path,
                                                                 tokenizer):
    from tests.conftest import make_tiny_model_dir

    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    base = LLM(model=str(tiny_model_dir), dtype="float32")
    ref = [o.token_ids for o in base.generate(REPETITIVE, params, use_tqdm=False)]
    same = draft_llm(tiny_model_dir, tiny_model_dir)  # the target as its own draft
    assert [o.token_ids for o in same.generate(REPETITIVE, params, use_tqdm=False)] == ref
    assert same.stats()["spec_acceptance_rate"] == 1.0
    other_dir = make_tiny_model_dir(tmp_path / "draft", tokenizer, seed=5, sharpen=3.0,
                                    tie_word_embeddings=False)
    other = draft_llm(tiny_model_dir, other_dir, num_kv_blocks=40, block_size=4)
    assert [o.token_ids for o in other.generate(REPETITIVE, params, use_tqdm=False)] == ref
    stats = other.stats()
    assert stats["spec_num_draft_tokens"] > 0 and stats["spec_acceptance_rate"] < 1.0
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]


def test_draft_model_sampling_keeps_target_distribution(tmp_path, tokenizer):
    """Sampled tokens 2 and 3 (draft-verified and bonus), spec on vs off, many seeds:
    the same distribution; a negative control at another temperature is far off."""
    from tests.conftest import make_tiny_model_dir

    target = make_tiny_model_dir(tmp_path / "t", tokenizer, seed=1, sharpen=6.0)
    draft = make_tiny_model_dir(tmp_path / "d", tokenizer, seed=2, sharpen=6.0)
    n = 800
    prompts = ["the"] * n

    def marginals(llm, temperature=1.0):
        # top_k keeps the support small enough to compare histograms of 800 samples
        params = [SamplingParams(max_tokens=3, temperature=temperature, top_k=4, seed=s,
                                 ignore_eos=True) for s in range(n)]
        outs = llm.generate(prompts, params, use_tqdm=False)
        return [np.bincount([o.token_ids[i] for o in outs], minlength=len(tokenizer))
                for i in (1, 2)]

    base = LLM(model=str(target), dtype="float32", num_kv_blocks=512)
    off = marginals(base)
    spec_llm = draft_llm(target, draft, max_num_seqs=64, num_kv_blocks=512)
    on = marginals(spec_llm)
    stats = spec_llm.stats()
    assert stats["spec_num_draft_tokens"] > 0 and 0 < stats["spec_acceptance_rate"] < 1
    control = marginals(base, temperature=0.3)
    for pos in (0, 1):
        tv = total_variation(off[pos].astype(float), on[pos].astype(float))
        tv_control = total_variation(off[pos].astype(float), control[pos].astype(float))
        print(pos, tv, tv_control)
        assert tv < 0.07, (pos, tv)
        assert tv_control > 2 * tv, (pos, tv, tv_control)


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                            "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.mark.parametrize("constraint", [{"json_schema": SCHEMA}, {"grammar": "json.lark"},
                                        {"regex": r"(ab|cd)+ [0-9]{2,4}"}])
def test_grammar_with_speculation_same_output_and_forced_drafts(tiny_model_dir, constraint):
    import json

    params = SamplingParams(max_tokens=30, temperature=0.0)
    base = LLM(model=str(tiny_model_dir), dtype="float32")
    spec = LLM(model=str(tiny_model_dir), dtype="float32",
               speculative={"method": "ngram", "prompt_lookup_min": 1})
    prompts = REPETITIVE[:2]
    ref = base.generate(prompts, params, use_tqdm=False, **constraint)
    got = spec.generate(prompts, params, use_tqdm=False, **constraint)
    assert [o.token_ids for o in got] == [o.token_ids for o in ref]
    stats = spec.stats()
    if "json_schema" in constraint:
        assert stats["structured_forced_drafts"] > 0  # keys and punctuation cost no model work
        for o in got:
            if o.finish_reason == "stop":
                assert set(json.loads(o.text)) == {"name", "age"}
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]


@pytest.mark.slow
@pytest.mark.parametrize("speculative", [
    {"method": "ngram", "num_speculative_tokens": 4},
    {"method": "draft", "num_speculative_tokens": 3},  # int8 copy of the target as draft
], ids=["ngram", "draft-int8"])
def test_real_model_greedy_identical_with_speculation(speculative):
    from specdec.bench.workload import chat_prompt_ids, extraction_prompts

    params = SamplingParams(max_tokens=48, temperature=0.0)
    base = LLM(dtype="float32", enable_prefix_caching=False)
    prompts = chat_prompt_ids(base.tokenizer, extraction_prompts(4))
    ref = [o.token_ids for o in base.generate(prompts, params, use_tqdm=False)]
    del base
    spec = LLM(dtype="float32", enable_prefix_caching=False, speculative=speculative)
    assert [o.token_ids for o in spec.generate(prompts, params, use_tqdm=False)] == ref
    stats = spec.stats()
    assert stats["spec_num_accepted_tokens"] > 0
    assert stats["steps"] < sum(len(r) for r in ref)  # fewer forwards than tokens


def test_logits_plugin_sees_every_verified_position(tiny_model_dir):
    """A ban applied by a logits plugin holds at draft positions too: same output as
    without speculation, and the hook saw rows for positions beyond the first."""
    from specdec import hookimpl

    class Ban:
        def __init__(self, token):
            self.token, self.rows = token, []

        @hookimpl
        def specdec_logits(self, logits, rows):
            for i, row in enumerate(rows):
                self.rows.append((row.position, len(row.draft_tokens_before)))
                logits[i, self.token] = float("-inf")

    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    free = LLM(model=str(tiny_model_dir), dtype="float32")
    banned_token = free.generate(REPETITIVE[0], params, use_tqdm=False)[0].token_ids[3]
    outs = {}
    for spec in (None, {"method": "ngram", "prompt_lookup_min": 1}):
        ban = Ban(banned_token)
        llm = LLM(model=str(tiny_model_dir), dtype="float32", plugins=[ban], speculative=spec)
        outs[spec is None] = llm.generate(REPETITIVE, params, use_tqdm=False)
        if spec:
            assert any(before > 0 for _, before in ban.rows)  # draft rows were shown
            assert llm.stats()["spec_num_draft_tokens"] > 0
    assert [o.token_ids for o in outs[True]] == [o.token_ids for o in outs[False]]
    assert all(banned_token not in o.token_ids for o in outs[False])
