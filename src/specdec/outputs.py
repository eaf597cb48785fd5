"""What a finished (or streaming) request returns to the caller."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestMetrics:
    arrival_time: float  # time.monotonic() seconds
    first_token_time: float | None = None
    finish_time: float | None = None
    num_generated_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache

    @property
    def ttft(self) -> float | None:
        """Time to first token, seconds."""
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def mean_itl(self) -> float | None:
        """Mean inter-token latency after the first token, seconds."""
        if self.first_token_time is None or self.finish_time is None:
            return None
        if self.num_generated_tokens < 2:
            return None
        return (self.finish_time - self.first_token_time) / (self.num_generated_tokens - 1)

    @property
    def e2e(self) -> float | None:
        return None if self.finish_time is None else self.finish_time - self.arrival_time


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    finish_reason: str | None  # "stop" | "length" | "abort" | "error"; None while running
    metrics: RequestMetrics
    error: str | None = None
    # Set with an error: the request was bad (a plugin refused its input, e.g. a constraint
    # that failed to compile after admission), not the server: HTTP 400, not 500.
    error_is_client: bool = False
    logprobs: list[dict[int, float]] | None = None
    delta_text: str = ""  # text added by the latest step (streaming)
    delta_token_ids: list[int] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
