"""Speculative verification: which draft tokens a request keeps. The only acceptance rule.

Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding";
Chen et al. 2023. A request with k drafts gets k + 1 logits rows; row ``j`` verifies
draft ``x_j`` proposed from ``q`` against the target distribution ``p`` (after all of
the request's processing):

* *accepted*: ``x`` is kept with probability ``min(1, p(x) / q(x))``;
* *recovered*: otherwise a token is drawn from ``norm(max(p - q, 0))``, which never
  equals ``x``, and the rest of the drafts are discarded;
* *bonus*: the row after the last draft samples plainly from ``p``.

The kept token is then exactly distributed as ``p``. A draft with no ``q`` (n-gram,
grammar-forced) is a point mass: the rule reduces to sampling from ``p`` and accepting
iff the sample equals ``x``, which is what plain sampling does; greedy rows accept
while the draft equals the argmax. So every row is sampled (:func:`verify_draft` for
rows with a ``q``), and :func:`accept_drafts` keeps each request's tokens up to and
including the first row whose token differs from its draft (the recovered token) or
the bonus row. Worked example, drafts ``[5, 8, 2]``, sampled rows ``[5, 8, 7, 4]``::

    token_ids = [5, 8, 7]   num_accepted_drafts = 2   (7 recovers draft 2; 4 is dropped)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from specdec.core.messages import LogitsRow, RequestSample, SampleOutput
from specdec.sample import categorical

if TYPE_CHECKING:
    from specdec.core.request import Request


def verify_draft(p: torch.Tensor, row: LogitsRow, generator: torch.Generator) -> int:
    """Rejection-sample the draft of ``row`` (proposed from ``row.draft_probs``):
    the draft itself when accepted, else a recovered token from the residual."""
    x, q = row.draft_token, row.draft_probs.to(p.dtype)
    if float(torch.rand((), generator=generator)) * float(q[x]) < float(p[x]):
        return x
    residual = (p - q).clamp_min_(0.0)
    if float(residual.sum()) <= 0.0:  # p == q up to rounding: any sample of p is fine
        residual = p.clone()
    residual[x] = 0.0  # rejection implies p(x) < q(x), so the residual at x is zero
    return categorical.sample(residual, generator)


def accept_drafts(rows: list[LogitsRow], token_ids: list[int],
                  logprobs: list[dict[int, float] | None]) -> SampleOutput:
    """Per request: the sampled tokens of its rows up to the first one that is not its
    draft (a recovered token, or the bonus row's). ``token_ids`` and ``logprobs`` hold
    one entry per row."""
    rows_of: dict[Request, list[int]] = {}  # request -> indices of its rows
    for index, row in enumerate(rows):
        rows_of.setdefault(row.request, []).append(index)
    output = SampleOutput()
    for request, indices in rows_of.items():
        kept: list[int] = []
        kept_logprobs: list[dict[int, float]] = []
        for index in indices:
            token = token_ids[index]
            kept.append(token)
            if logprobs[index] is not None:
                kept_logprobs.append(logprobs[index])
            draft = rows[index].draft_token
            if draft is None or token != draft:
                break
        output.samples.append(RequestSample(request, kept, len(kept) - 1, kept_logprobs))
    return output
