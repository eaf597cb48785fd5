"""``LLM(speculative={...})`` settings, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

METHODS = ("ngram", "draft")


@dataclass
class SpeculativeConfig:
    method: str = "ngram"
    num_speculative_tokens: int = 4
    prompt_lookup_min: int = 2  # n-gram: shortest suffix that may match
    prompt_lookup_max: int = 5  # n-gram: longest suffix tried first
    model: str | None = None  # draft model path; None / "default": quantized copy of the target
    draft_quantization: str = "int8"  # "int8" | "none": weight-only quantization of the draft
    # Policy: speculate only while the step stays latency-bound, i.e. while
    # (decoding requests) * (k + 1) <= max_speculative_tokens; larger batches are
    # compute-bound and extra verified tokens would cost throughput.
    max_speculative_tokens: int = 96  # measured best for the offline benchmark (docs)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"speculative method must be one of {METHODS}, got {self.method!r}")
        if not 1 <= self.num_speculative_tokens <= 16:
            raise ValueError("num_speculative_tokens must be in [1, 16]")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        if self.draft_quantization not in ("int8", "none"):
            raise ValueError(
                f"draft_quantization must be 'int8' or 'none', got {self.draft_quantization!r}"
            )
        if self.max_speculative_tokens < 0:
            raise ValueError("max_speculative_tokens must be >= 0")

    @classmethod
    def from_dict(cls, options: dict[str, Any]) -> SpeculativeConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(options) - known
        if unknown:
            raise ValueError(
                f"unknown speculative option(s) {sorted(unknown)}; known: {sorted(known)}"
            )
        return cls(**options)
