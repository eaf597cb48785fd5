"""Per-request sampling parameters, validated on construction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

GREEDY_TEMPERATURE = 1e-5  # below this, sampling is argmax (vLLM's _SAMPLING_EPS)


@dataclass
class SamplingParams:
    """How one request is sampled and when it stops (vLLM's names and defaults).

    ``temperature=0`` is greedy, and so is any temperature below ``GREEDY_TEMPERATURE``
    (dividing logits by it would overflow to inf and sample token 0 forever).
    ``top_k=-1`` (or 0) and ``top_p=1`` disable those filters. ``seed`` is in
    ``[0, 2**64)``. ``extra`` carries per-request options for plugins (e.g. ``grammar``).
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] | str | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    logprobs: int | None = None
    skip_special_tokens: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        self.extra = dict(self.extra or {})
        _check(isinstance(self.max_tokens, int) and self.max_tokens >= 1,
               f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        _check(_is_number(self.temperature) and self.temperature >= 0,
               f"temperature must be a finite number >= 0, got {self.temperature!r}")
        _check(_is_number(self.top_p) and 0 < self.top_p <= 1,
               f"top_p must be in (0, 1], got {self.top_p!r}")
        _check(isinstance(self.top_k, int) and self.top_k >= -1,
               f"top_k must be -1 (disabled) or >= 1, got {self.top_k!r}")
        _check(_is_number(self.min_p) and 0 <= self.min_p <= 1,
               f"min_p must be in [0, 1], got {self.min_p!r}")
        _check(self.seed is None or (isinstance(self.seed, int) and not isinstance(self.seed, bool)
                                     and 0 <= self.seed < 2**64),
               f"seed must be an integer in [0, 2**64), got {self.seed!r}")
        _check(all(isinstance(s, str) and s for s in self.stop),
               f"stop must be non-empty strings, got {self.stop!r}")
        _check(all(isinstance(t, int) and t >= 0 for t in self.stop_token_ids),
               f"stop_token_ids must be non-negative integers, got {self.stop_token_ids!r}")
        _check(self.logprobs is None or (isinstance(self.logprobs, int)
                                         and 0 <= self.logprobs <= 20),
               f"logprobs must be an integer in [0, 20], got {self.logprobs!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE


def _is_number(x: Any) -> bool:
    """A finite int or float (not a bool, nan or inf)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    return isinstance(x, int) or math.isfinite(x)  # isfinite overflows on huge ints


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)
