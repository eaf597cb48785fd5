"""What the scheduler decided for one step (read by the runner and plugins)."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)  # preempted during this step

    @property
    def total_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled
