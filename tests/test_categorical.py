"""Inverse-CDF draws: the target distribution exactly, never a zero-probability token."""

from __future__ import annotations

import pytest
import torch

from specdec.sample import categorical

LARGEST_BELOW_ONE = 1.0 - 2.0**-53


def test_frequencies_pass_a_chi_square_test():
    p = torch.tensor([0.5, 0.0, 0.25, 0.125, 0.0625, 0.0625, 0.0])
    n = 40_000
    g = torch.Generator().manual_seed(7)
    tokens = categorical.draw(p.repeat(n, 1), torch.rand(n, generator=g, dtype=torch.float64))
    counts = torch.bincount(tokens, minlength=len(p)).double()
    assert counts[p == 0].sum() == 0
    expected = n * p[p > 0].double()
    chi2 = float(((counts[p > 0] - expected) ** 2 / expected).sum())
    assert chi2 < 18.5  # 4 degrees of freedom: p < 0.001


@pytest.mark.parametrize("u", [0.0, 0.5, LARGEST_BELOW_ONE])
def test_zero_probability_tokens_are_never_drawn_even_at_the_ends(u):
    p = torch.tensor([[0.0, 0.3, 0.0, 0.7, 0.0, 0.0]])
    token = int(categorical.draw(p, torch.tensor([u], dtype=torch.float64))[0])
    assert p[0, token] > 0
    assert token == (1 if u < 0.3 else 3)


def test_unnormalised_weights_and_rounding_at_the_top():
    # float32 masses whose float64 sum is not what u * total rounds to near u = 1
    p = torch.full((1, 49_152), 1e-3) * torch.linspace(0.1, 1.0, 49_152)
    p[0, -3:] = 0.0
    top = categorical.draw(p, torch.tensor([LARGEST_BELOW_ONE], dtype=torch.float64))
    assert int(top[0]) == 49_152 - 4
    assert int(categorical.draw(p, torch.tensor([0.0], dtype=torch.float64))[0]) == 0


def test_each_row_uses_its_own_generator():
    p = torch.softmax(torch.randn(3, 1000, generator=torch.Generator().manual_seed(0)), -1)
    seeds = [11, 22, 33]
    together = categorical.sample_rows(p, [torch.Generator().manual_seed(s) for s in seeds])
    alone = [categorical.sample(p[i], torch.Generator().manual_seed(s))
             for i, s in enumerate(seeds)]
    assert together.tolist() == alone
