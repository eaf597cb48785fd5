"""The plugin object registered through the ``specdec`` entry point."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec import hookimpl

NAME = "repetition_penalty"


@dataclass(frozen=True)
class Penalties:
    presence: float = 0.0
    frequency: float = 0.0
    repetition: float = 1.0


class RepetitionPenaltyPlugin:
    @hookimpl
    def specdec_request_options(self) -> list[str]:
        return ["presence_penalty", "frequency_penalty", "repetition_penalty"]

    @hookimpl
    def specdec_request_added(self, request) -> None:
        extra = request.sampling_params.extra
        penalties = Penalties(
            presence=_number(extra, "presence_penalty", 0.0, -2.0, 2.0),
            frequency=_number(extra, "frequency_penalty", 0.0, -2.0, 2.0),
            repetition=_number(extra, "repetition_penalty", 1.0, 1e-3, 100.0),
        )
        if penalties != Penalties():
            request.plugin_data[NAME] = penalties

    @hookimpl
    def specdec_logits(self, logits: torch.Tensor, rows) -> None:
        vocab = logits.shape[-1]
        for i, row in enumerate(rows):
            penalties: Penalties | None = row.request.plugin_data.get(NAME)
            if penalties is None:
                continue
            output = row.request.output_token_ids + row.draft_tokens_before
            if penalties.repetition != 1.0:
                seen = torch.tensor(row.request.prompt_token_ids + output, dtype=torch.long)
                values = logits[i, seen]
                logits[i, seen] = torch.where(values > 0, values / penalties.repetition,
                                              values * penalties.repetition)
            if output and (penalties.presence or penalties.frequency):
                counts = torch.bincount(torch.tensor(output, dtype=torch.long),
                                        minlength=vocab)[:vocab].to(logits.dtype)
                logits[i] -= penalties.frequency * counts + penalties.presence * (counts > 0)


def _number(extra: dict, name: str, default: float, low: float, high: float) -> float:
    value = extra.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"{name} must be a number in [{low}, {high}], got {value!r}")
    return float(value)
