"""The messages one engine step passes between its stages.

::

    Scheduler --SchedulerOutput--> ModelRunner --RunnerOutput--> Sampler + rejection
        ^                                                               |
        +----------------------- SampleOutput (Scheduler.update) <------+

Each is a plain dataclass read by the next stage (and by plugins); none holds
behaviour beyond derived properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from specdec.core.request import Request


@dataclass
class ScheduledRequest:
    request: Request
    num_tokens: int  # tokens computed this step, starting at request.num_computed_tokens
    num_draft_tokens: int  # how many of them are draft tokens (at the end)
    block_ids: list[int]  # the request's full block table

    @property
    def start(self) -> int:
        return self.request.num_computed_tokens

    @property
    def samples(self) -> bool:
        """True when the step reaches the request's last token, so it samples."""
        return self.start + self.num_tokens >= self.request.num_tokens_with_drafts


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledRequest] = field(default_factory=list)  # what runs, in order
    preempted: list[Request] = field(default_factory=list)  # preempted during this step

    @property
    def total_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


@dataclass
class LogitsRow:
    """Which request and output position one row of the step's logits belongs to."""

    request: Request
    position: int  # index in request.output_token_ids of the token this row predicts
    draft_tokens_before: list[int]  # drafts assumed accepted before this row (k-th row: k drafts)
    draft_token: int | None  # the draft this row verifies; None for the last (bonus) row
    draft_probs: torch.Tensor | None = None  # [vocab] proposal distribution q; None: point mass


@dataclass
class RunnerOutput:
    logits: torch.Tensor  # [num_rows, vocab] float32, one row per sampled position
    rows: list[LogitsRow]  # rows[i] says what logits[i] predicts; a request's rows are adjacent


@dataclass(slots=True)
class RequestSample:
    """What one request got from the step's sampling."""

    request: Request
    token_ids: list[int]  # the accepted drafts, then one recovered or bonus token
    num_accepted_drafts: int  # drafts kept (len(token_ids) - 1); stops may cut token_ids later
    logprobs: list[dict[int, float]]  # per token of token_ids when requested, else empty


@dataclass
class SampleOutput:
    samples: list[RequestSample] = field(default_factory=list)  # per request, in row order
