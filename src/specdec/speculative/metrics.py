"""Speculation counters: drafts, draft tokens, accepted tokens, per-position acceptance."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecMetrics:
    num_drafts: int = 0  # verification rounds with at least one draft token
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    drafts_per_position: list[int] = field(default_factory=list)

    def record(self, num_drafts: int, num_accepted: int) -> None:
        if num_drafts <= 0:
            return
        self.num_drafts += 1
        self.num_draft_tokens += num_drafts
        self.num_accepted_tokens += num_accepted
        while len(self.drafts_per_position) < num_drafts:
            self.drafts_per_position.append(0)
            self.accepted_per_position.append(0)
        for i in range(num_drafts):
            self.drafts_per_position[i] += 1
            self.accepted_per_position[i] += i < num_accepted

    def as_dict(self) -> dict[str, float | int | list[float]]:
        rounds = max(self.num_drafts, 1)
        return {
            "spec_num_drafts": self.num_drafts,
            "spec_num_draft_tokens": self.num_draft_tokens,
            "spec_num_accepted_tokens": self.num_accepted_tokens,
            "spec_acceptance_rate": self.num_accepted_tokens / max(self.num_draft_tokens, 1),
            # tokens produced per verification round, including the bonus/recovered token
            "spec_mean_acceptance_length": 1 + self.num_accepted_tokens / rounds,
            "spec_acceptance_per_position": [
                a / d for a, d in zip(self.accepted_per_position, self.drafts_per_position,
                                      strict=True)
            ],
        }
