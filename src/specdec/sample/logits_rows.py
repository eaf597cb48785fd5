"""Which request and output position each row of the step's logits belongs to."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.core.request import Request


@dataclass
class LogitsRow:
    request: Request
    position: int  # index in request.output_token_ids of the token this row predicts
    draft_tokens_before: list[int]  # drafts assumed accepted before this row (k-th row: k drafts)
    draft_token: int | None  # the draft this row verifies; None for the last (bonus) row
    draft_probs: torch.Tensor | None = None  # [vocab] proposal distribution q; None: point mass
