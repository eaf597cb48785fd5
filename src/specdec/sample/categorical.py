"""Drawing tokens from categorical distributions: inverse CDF, one uniform per row.

Token ``i`` is the first whose cumulative probability exceeds ``u * total`` for a
uniform ``u`` in [0, 1): it is drawn with probability ``p_i / total`` exactly, up to
float64 rounding of the running sum (2^-53 relative). The cost is one cumulative sum
(~60 µs over 49 152 tokens); the exponential race (``argmax(p / E)``, ``E ~ Exp(1)``)
draws a random number per vocabulary entry instead, ~0.95 ms a row on CPU, a third of
a decode step.

Each row's uniform comes from its own generator, so a seeded request's tokens do not
depend on what else is in the batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def draw(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """``[R, V]`` unnormalised probabilities (>= 0) and ``[R]`` uniforms in [0, 1):
    the ``[R]`` tokens drawn. A zero-probability token is never drawn."""
    cdf = probs.cumsum(-1, dtype=torch.float64)
    total = cdf[:, -1:].contiguous()
    target = uniforms.to(torch.float64).unsqueeze(1) * total
    token = torch.searchsorted(cdf, target, right=True)  # first cdf[i] > target
    # u * total can round up to total: the last token with mass is the first whose
    # cdf reaches total (the tokens after it add nothing).
    last = torch.searchsorted(cdf, total, right=False)
    return torch.minimum(token, last).clamp_(max=probs.shape[-1] - 1).squeeze(1)


def uniforms(generators: Sequence[torch.Generator]) -> torch.Tensor:
    """``[R]`` float64 uniforms in [0, 1), one from each generator."""
    if len(generators) == 1:  # a decode's row: no cat (each op costs, see filters._fusable)
        return torch.rand(1, generator=generators[0], dtype=torch.float64)
    return torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])


def sample_rows(probs: torch.Tensor, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """One token per row of ``[R, V]`` ``probs``, row ``r`` drawn with ``generators[r]``."""
    return draw(probs, uniforms(generators))


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token from a ``[V]`` distribution."""
    return int(sample_rows(probs.unsqueeze(0), [generator])[0])
