"""The fused draw (kernels/sample_rows.h): an inverse CDF of softmax(logits / T) with
min-p, checked on an even grid of uniforms, where each token's share of the grid must be
its probability."""

from __future__ import annotations

import pytest
import torch

from specdec import SamplingParams, kernels
from specdec.sample.filters import processed_probs

K = kernels.load()
pytestmark = pytest.mark.skipif(K is None, reason="fused CPU kernels could not be built")

GRID = 50_000  # rows of GRID x vocab floats: ~400 MB at the widest case


def draws_on_a_grid(logits: torch.Tensor, temperature: float, min_p: float) -> torch.Tensor:
    """The token for each of GRID evenly spaced uniforms (one row repeated)."""
    rows = logits.expand(GRID, -1).contiguous()
    u = (torch.arange(GRID, dtype=torch.float64) + 0.5) / GRID
    inv_t = torch.full((GRID,), 1.0 / temperature)
    floor = torch.full((GRID,), min_p)
    return K.sample_rows(rows, inv_t, floor, u)


@pytest.mark.parametrize("vocab", [5, 1000, 2048 + 7])  # tails: < 16, one block, several
@pytest.mark.parametrize("temperature,min_p", [(1.0, 0.0), (0.6, 0.0), (1.7, 0.05)])
def test_each_tokens_share_of_the_grid_is_its_probability(vocab, temperature, min_p):
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(1, vocab, generator=g) * 2.5
    logits[0, :: max(vocab // 7, 2)] = -torch.inf  # masked tokens (a grammar's)
    tokens = draws_on_a_grid(logits, temperature, min_p)
    assert bool((tokens[1:] >= tokens[:-1]).all())  # an inverse CDF: monotone in u
    want = processed_probs(logits, [SamplingParams(temperature=temperature, min_p=min_p)])[0]
    share = torch.bincount(tokens, minlength=vocab).double() / GRID
    assert bool((share[want == 0] == 0).all())  # masked or below min-p: never drawn
    assert float((share - want.double()).abs().max()) < 2.0 / GRID + 1e-5


@pytest.mark.parametrize("u", [0.0, 1.0 - 2.0**-53])
def test_the_ends_of_the_uniforms_land_on_tokens_with_mass(u):
    logits = torch.full((1, 3000), -torch.inf)
    logits[0, [17, 2047, 2100]] = torch.tensor([0.0, 1.0, 0.5])
    token = K.sample_rows(logits, torch.ones(1), torch.zeros(1), torch.tensor([u],
                                                                              dtype=torch.float64))
    assert int(token[0]) == (17 if u == 0.0 else 2100)


def test_rows_are_independent_and_match_their_single_draws():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(9, 49_152, generator=g) * 3
    inv_t = torch.rand(9, generator=g) + 0.5
    min_p = torch.tensor([0.0, 0.1] * 4 + [0.0])
    u = torch.rand(9, generator=g, dtype=torch.float64)
    together = K.sample_rows(logits, inv_t, min_p, u)
    for r in range(9):
        alone = K.sample_rows(logits[r : r + 1].clone(), inv_t[r : r + 1], min_p[r : r + 1],
                              u[r : r + 1])
        assert int(alone[0]) == int(together[r])


def filtered_grid(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    rows = logits.expand(GRID, -1).contiguous()
    u = (torch.arange(GRID, dtype=torch.float64) + 0.5) / GRID
    return K.sample_filtered_rows(
        rows, torch.full((GRID,), 1.0 / params.temperature),
        torch.full((GRID,), params.top_k, dtype=torch.long),
        torch.full((GRID,), params.top_p, dtype=torch.float64),
        torch.full((GRID,), params.min_p), u)


FILTERS = [
    SamplingParams(top_p=0.9), SamplingParams(top_p=0.3), SamplingParams(top_p=0.999),
    SamplingParams(top_k=1), SamplingParams(top_k=40), SamplingParams(top_k=900),
    SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    SamplingParams(temperature=1.5, top_p=0.95, min_p=0.01),
]


@pytest.mark.parametrize("params", FILTERS, ids=repr)
@pytest.mark.parametrize("scale", [8.0, 1.0, 0.05])  # peaked .. flat past the first floor
def test_filtered_draws_share_the_grid_as_the_filters_say(params, scale):
    vocab = 1000 + 3
    logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(5)) * scale
    logits[0, ::11] = -torch.inf
    tokens = filtered_grid(logits, params)
    want = processed_probs(logits, [params])[0].double()
    share = torch.bincount(tokens, minlength=vocab).double() / GRID
    assert bool((share[want == 0] == 0).all())  # outside the filters: never drawn
    assert float((share - want).abs().max()) < 2.0 / GRID + 1e-5


def test_the_same_draws_at_every_isa_level():
    # Vec16's exp is the same polynomial on AVX-512 and AVX2, and the sums run lane by
    # lane in the same order: a seed draws the same tokens from the same logits on any
    # x86 CPU. (This file runs at each level the CPU has: tests/test_isa_levels.py.)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(8, 4099, generator=g) * 3
    u = torch.rand(8, generator=g, dtype=torch.float64)
    inv_t = torch.rand(8, generator=g) + 0.5
    plain = K.sample_rows(logits, inv_t, torch.zeros(8), u)
    filtered = K.sample_filtered_rows(logits, inv_t, torch.full((8,), 40, dtype=torch.long),
                                      torch.full((8,), 0.9, dtype=torch.float64),
                                      torch.full((8,), 0.02), u)
    assert plain.tolist() == [3479, 3240, 736, 1984, 2112, 2108, 3998, 3744]
    assert filtered.tolist() == [1862, 2625, 736, 2568, 847, 2340, 1059, 3791]


def test_arguments_of_the_wrong_dtype_or_length_are_refused():
    logits = torch.zeros(2, 50)
    ok = dict(inv_temp=torch.ones(2), min_p=torch.zeros(2),
              uniforms=torch.zeros(2, dtype=torch.float64))
    assert K.sample_rows(logits, *ok.values()).tolist() == [0, 0]
    with pytest.raises(RuntimeError, match="where Double is expected"):
        K.sample_rows(logits, ok["inv_temp"], ok["min_p"], torch.zeros(2))
    with pytest.raises(RuntimeError, match="one value a row"):
        K.sample_filtered_rows(logits, torch.ones(3), torch.zeros(2, dtype=torch.long),
                               torch.ones(2, dtype=torch.float64), ok["min_p"], ok["uniforms"])
    with pytest.raises(RuntimeError, match="float32 \\[rows, vocab\\]"):
        K.sample_rows(logits.double(), *ok.values())
