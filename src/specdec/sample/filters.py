"""The distribution a sampled row draws from: temperature, then top-k, top-p, min-p.

A row with top-k or top-p keeps a few tokens of the vocabulary: its *candidates*, found
by ``topk`` rather than a sort of the vocabulary (~3.5 ms a 49 152-token row), and its
draw looks at those alone. Top-k keeps the k largest logits; top-p then keeps the
smallest set of most likely tokens whose mass (over the top-k, or over the vocabulary
without one) reaches ``p``: a token is kept while the mass ranked above it is below
``p``. Top-p candidates are looked for among the 64 most likely tokens first, 16 times
more while a row's nucleus is wider. Min-p then drops the kept tokens less likely than
``min_p`` times the most likely one.

:func:`sample_tokens` draws from the candidates; :func:`processed_probs` spreads the
same distribution over the vocabulary, for rows whose draws are compared with a draft's
(rejection sampling needs both distributions whole). With the fused kernels, float32 rows
are drawn by ``kernels/sample_rows.h`` instead, by the same rules (its ``exp`` differs
from torch's by ~1 ulp).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec.sample import categorical

FIRST_CANDIDATES = 64  # top-p candidates looked at first; widened 16x while too few


@dataclass
class Candidates:
    """Each row's kept tokens: ``logits [R, W]`` (-inf past a row's last) and their
    vocabulary ``index [R, W]``."""

    logits: torch.Tensor
    index: torch.Tensor


def sample_tokens(logits: torch.Tensor, params: list,
                  generators: Sequence[torch.Generator], kernels=None) -> torch.Tensor:
    """One token per row of ``[R, V]`` logits, drawn from its processed distribution
    with its generator: by the fused kernels where they apply (``kernels/sample_rows.h``),
    else by torch, the same rules."""
    vocab = logits.shape[-1]
    filtered = [i for i, p in enumerate(params) if _has_filter(p, vocab)]
    plain = sorted(set(range(len(params))) - set(filtered))
    if not filtered:
        return _sample_plain(logits, params, generators, kernels)
    if not plain:
        return _sample_filtered(logits, params, generators, kernels)
    tokens = torch.empty(len(params), dtype=torch.long)
    tokens[plain] = _sample_plain(logits[plain], [params[i] for i in plain],
                                  [generators[i] for i in plain], kernels)
    tokens[filtered] = _sample_filtered(logits[filtered], [params[i] for i in filtered],
                                        [generators[i] for i in filtered], kernels)
    return tokens


def _sample_filtered(logits: torch.Tensor, params: list, generators, kernels) -> torch.Tensor:
    """Rows with top-k or top-p: drawn among their candidates."""
    inv_temp = [1.0 / p.temperature for p in params]
    if _fusable(logits, inv_temp, kernels):
        return kernels.sample_filtered_rows(
            logits, torch.tensor(inv_temp, dtype=torch.float32),
            torch.tensor([p.top_k for p in params], dtype=torch.long),
            torch.tensor([p.top_p for p in params], dtype=torch.float64),
            torch.tensor([p.min_p for p in params], dtype=torch.float32),
            categorical.uniforms(generators))
    kept = candidates(_scaled(logits, params), params)
    local = categorical.sample_rows(_min_p(torch.softmax(kept.logits, -1), params), generators)
    return kept.index.gather(1, local.unsqueeze(1)).squeeze(1)


def _sample_plain(logits: torch.Tensor, params: list, generators, kernels) -> torch.Tensor:
    """Rows with temperature and min-p only."""
    inv_temp = [1.0 / p.temperature for p in params]
    if _fusable(logits, inv_temp, kernels):
        min_p = torch.tensor([p.min_p for p in params], dtype=torch.float32)
        return kernels.sample_rows(logits, torch.tensor(inv_temp, dtype=torch.float32), min_p,
                                   categorical.uniforms(generators))
    probs = _min_p(torch.softmax(_scaled(logits, params), -1), params)
    return categorical.sample_rows(probs, generators)


def processed_probs(logits: torch.Tensor, params: list) -> torch.Tensor:
    """``[R, V]``: the distribution each row samples from, over the whole vocabulary."""
    scaled = _scaled(logits, params)
    filtered = [i for i, p in enumerate(params) if _has_filter(p, logits.shape[-1])]
    if filtered:
        kept = candidates(scaled[filtered], [params[i] for i in filtered])
        masked = torch.full((len(filtered), logits.shape[-1]), float("-inf"), dtype=scaled.dtype)
        # amax: a padding column (index 0, -inf) never overwrites a kept token 0
        scaled[filtered] = masked.scatter_reduce_(1, kept.index, kept.logits, reduce="amax")
    return _min_p(torch.softmax(scaled, -1), params)


def candidates(logits: torch.Tensor, params: list) -> Candidates:
    """The top-k, then top-p, tokens of each row of temperature-scaled ``logits``."""
    rows, vocab = logits.shape
    top_k = torch.tensor([p.top_k if 0 < p.top_k < vocab else vocab for p in params])
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float64)
    # The mass top-p measures: over the top-k where there is one, else the vocabulary.
    log_norm = torch.zeros(rows, dtype=torch.float64)
    whole = (top_k == vocab).nonzero().squeeze(1)
    if len(whole) == rows:
        log_norm = torch.logsumexp(logits.double(), -1)
    elif len(whole):
        log_norm[whole] = torch.logsumexp(logits[whole].double(), -1)
    blocks = []  # (rows, logits, index) of the rows each widening completed
    pending = torch.arange(rows)
    width = FIRST_CANDIDATES
    while len(pending):
        every = len(pending) == rows  # the first pass: no rows to pick out
        k, p = top_k[pending], top_p[pending]
        # Rows with a top-k see all of it at once; others widen while their nucleus does.
        widths = torch.where(k < vocab, k, min(width, vocab))
        values, index = (logits if every else logits[pending]).topk(int(widths.max()), dim=-1)
        values = values.masked_fill(torch.arange(values.shape[1]) >= k.unsqueeze(1), -torch.inf)
        norm = torch.where(k < vocab, torch.logsumexp(values.double(), -1),
                           log_norm if every else log_norm[pending])
        probs = torch.exp(values.double() - norm.unsqueeze(1))
        mass = probs.cumsum(-1)
        keep = ((mass - probs < p.unsqueeze(1)) | (p >= 1.0).unsqueeze(1)) & (values > -torch.inf)
        values.masked_fill_(~keep, -torch.inf)
        # Complete: the row's top-k seen, its nucleus reached, or no token left with mass.
        complete = (widths >= k) | (mass[:, -1] >= p) | (values[:, -1] == -torch.inf)
        n = int(keep.sum(1).max())  # a prefix of each row is kept
        if bool(complete.all()):
            if every:
                return Candidates(values[:, :n].contiguous(), index[:, :n].contiguous())
            blocks.append((pending, values[:, :n], index[:, :n]))
            break
        if bool(complete.any()):
            blocks.append((pending[complete], values[complete, :n], index[complete, :n]))
        pending = pending[~complete]
        width *= 16
    longest = max(block[1].shape[1] for block in blocks)
    out_logits = torch.full((rows, longest), -torch.inf, dtype=logits.dtype)
    out_index = torch.zeros(rows, longest, dtype=torch.long)
    for done, kept, index in blocks:
        out_logits[done, : kept.shape[1]] = kept
        out_index[done, : index.shape[1]] = index
    return Candidates(out_logits, out_index)


def _fusable(logits: torch.Tensor, inv_temp: list[float], kernels) -> bool:
    """Whether the fused kernels draw these rows (float32 rows, finite 1 / temperature).
    Checked on the Python floats: after a decode step has streamed the weights through
    the caches, each small torch op costs 20-150 µs (its code and data come back from
    memory), and the check as three ops was half the sampler's time."""
    return (kernels is not None and logits.dtype == torch.float32 and logits.is_contiguous()
            and all(_finite_in_float32(x) for x in inv_temp))


def _finite_in_float32(x: float) -> bool:
    """Whether ``x`` stays finite rounded to float32, as the kernels receive it."""
    try:
        return math.isfinite(struct.unpack("f", struct.pack("f", x))[0])
    except OverflowError:  # rounds past float32's largest value
        return False


def _scaled(logits: torch.Tensor, params: list) -> torch.Tensor:
    """A new tensor: each row's logits over its temperature."""
    temps = torch.tensor([p.temperature for p in params], dtype=logits.dtype)
    return logits / temps[:, None]


def _has_filter(p, vocab: int) -> bool:
    return 0 < p.top_k < vocab or p.top_p < 1.0


def _min_p(probs: torch.Tensor, params: list) -> torch.Tensor:
    """Rows' tokens less likely than ``min_p`` x their most likely one dropped, renormalised."""
    min_p = torch.tensor([p.min_p for p in params], dtype=probs.dtype)
    if not bool((min_p > 0).any()):
        return probs
    threshold = probs.max(dim=-1, keepdim=True).values * min_p[:, None]
    probs = probs.masked_fill(probs < threshold, 0.0)
    return probs / probs.sum(dim=-1, keepdim=True)
