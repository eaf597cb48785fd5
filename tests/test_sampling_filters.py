"""Top-k / top-p / min-p against a plain full-sort reference, on wide and narrow rows;
the candidates' draw and the whole-vocabulary distribution agree."""

from __future__ import annotations

import pytest
import torch

from specdec import SamplingParams
from specdec.sample.filters import FIRST_CANDIDATES, candidates, processed_probs, sample_tokens


def reference_probs(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """One row, by the definitions: sort, top-k, renormalise, top-p, min-p."""
    scaled = (logits / p.temperature).double()  # the temperature applied in float32
    values, index = scaled.sort(descending=True)
    if 0 < p.top_k < len(values):
        values[p.top_k:] = -torch.inf
    probs = torch.softmax(values, 0)
    above = probs.cumsum(0) - probs
    if p.top_p < 1.0:
        probs[above >= p.top_p] = 0.0
    probs[probs < p.min_p * probs.max()] = 0.0
    out = torch.zeros_like(probs)
    out[index] = probs / probs.sum()
    return out


def rows_of_every_width(vocab: int = 5000) -> torch.Tensor:
    """Peaked rows (a nucleus of a few tokens) up to flat ones (thousands)."""
    g = torch.Generator().manual_seed(3)
    scales = torch.tensor([12.0, 6.0, 3.0, 1.0, 0.3, 0.1, 0.02])  # no exact ties: free order
    logits = torch.randn(len(scales), vocab, generator=g) * scales[:, None]
    logits[2, 100:] = -torch.inf  # fewer tokens with mass than candidates
    return logits


CASES = [
    SamplingParams(top_p=0.05), SamplingParams(top_p=0.5), SamplingParams(top_p=0.9),
    SamplingParams(top_p=0.999999), SamplingParams(top_p=1e-9),
    SamplingParams(top_k=1), SamplingParams(top_k=40), SamplingParams(top_k=3000),
    SamplingParams(top_k=40, top_p=0.8), SamplingParams(top_k=2000, top_p=0.95, min_p=0.01),
    SamplingParams(temperature=0.5, top_p=0.9, min_p=0.1), SamplingParams(min_p=0.2),
]


@pytest.mark.parametrize("params", CASES, ids=repr)
def test_distribution_equals_the_full_sort_reference(params):
    logits = rows_of_every_width()
    probs = processed_probs(logits, [params] * len(logits))
    for row in range(len(logits)):
        want = reference_probs(logits[row], params)
        assert torch.equal(probs[row] > 0, want > 0), row
        torch.testing.assert_close(probs[row].double(), want, atol=1e-6, rtol=1e-4)


def test_flat_rows_widen_past_the_first_candidates():
    logits = rows_of_every_width()
    kept = candidates(logits, [SamplingParams(top_p=0.9)] * len(logits))
    counts = torch.isfinite(kept.logits).sum(1)
    assert int(counts.max()) > 16 * FIRST_CANDIDATES and int(counts.min()) <= 3
    assert int(counts[2]) <= 100  # the row with 100 tokens left


def test_a_kept_token_zero_survives_the_padding():
    logits = torch.full((2, 50), -5.0)
    logits[0, 0] = 5.0  # one kept token (0): its row is padded to the other's width
    logits[1, 10:20] = 5.0
    probs = processed_probs(logits, [SamplingParams(top_p=0.9)] * 2)
    assert probs[0, 0] == 1.0
    assert torch.equal((probs[1] > 0).nonzero().squeeze(1), torch.arange(10, 20))


def test_mixed_rows_and_draws_follow_each_rows_distribution():
    logits = rows_of_every_width(300)[[0, 3, 4]]
    params = [SamplingParams(top_k=5), SamplingParams(), SamplingParams(top_p=0.7)]
    probs = processed_probs(logits, params)
    g = torch.Generator().manual_seed(0)
    n = 3000
    draws = torch.stack([sample_tokens(logits, params, [g] * 3) for _ in range(n)])
    for row, p in enumerate(params):
        want = reference_probs(logits[row], p)
        torch.testing.assert_close(probs[row].double(), want, atol=1e-6, rtol=1e-4)
        freq = torch.bincount(draws[:, row], minlength=300).double() / n
        assert (freq[want == 0] == 0).all()
        assert float((freq - want).abs().max()) < 0.04
