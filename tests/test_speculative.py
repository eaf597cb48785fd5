"""Speculative decoding: exact verification, n-gram proposals, greedy identity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec import LLM, SamplingParams
from specdec.core.request import Request
from specdec.sample.logits_rows import LogitsRow
from specdec.sample.sampler import Sampler
from specdec.spec.ngram import TokenHistory, propose_ngram


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
