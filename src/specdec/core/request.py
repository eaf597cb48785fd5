"""A request's state as it moves through the engine."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from specdec.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    """One generation request.

    The single scheduling rule: ``num_computed_tokens`` (tokens whose KV is in the
    cache) catches up toward ``num_tokens_with_drafts`` (prompt + output + drafts).
    """

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    arrival_time: float = field(default_factory=time.monotonic)
    output_token_ids: list[int] = field(default_factory=list)
    draft_token_ids: list[int] = field(default_factory=list)  # proposals to verify this step
    draft_probs: torch.Tensor | None = None  # [k, vocab] proposal distributions; None: point mass
    num_computed_tokens: int = 0
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: str | None = None
    error: str | None = None
    error_is_client: bool = False  # the error is the request's fault (a bad constraint...)
    blocked_reason: str | None = None  # set by plugins: not schedulable until cleared
    num_preemptions: int = 0
    num_cached_prompt_tokens: int = 0  # prompt tokens served by the prefix cache
    first_token_time: float | None = None
    finish_time: float | None = None
    logprobs: list[dict[int, float]] = field(default_factory=list)
    plugin_data: dict[str, Any] = field(default_factory=dict)
    generator: torch.Generator | None = None  # per-request RNG when seeded
    is_finished_pending: bool = False  # the engine will finish it after post-processing

    def clear_drafts(self) -> None:
        self.draft_token_ids.clear()
        self.draft_probs = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_tokens_with_drafts(self) -> int:
        return self.num_tokens + len(self.draft_token_ids)

    def tokens_slice(self, start: int, end: int) -> list[int]:
        """Tokens ``[start, end)`` of prompt + output + drafts."""
        n_prompt = len(self.prompt_token_ids)
        if start >= n_prompt:
            tail = self.output_token_ids + self.draft_token_ids
            return tail[start - n_prompt : end - n_prompt]
        return (self.prompt_token_ids + self.output_token_ids + self.draft_token_ids)[start:end]

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED
