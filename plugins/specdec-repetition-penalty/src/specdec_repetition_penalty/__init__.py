"""specdec plugin: OpenAI's presence / frequency penalties and vLLM's repetition penalty.

Request options, each off unless given:

- ``presence_penalty`` p in [-2, 2]: ``logit[t] -= p`` for every token ``t`` already output;
- ``frequency_penalty`` f in [-2, 2]: ``logit[t] -= f * count(t in output)``;
- ``repetition_penalty`` r > 0 (1 = off): for tokens in the prompt or the output,
  positive logits are divided by r and negative ones multiplied (HF / vLLM semantics).

Through ``specdec serve`` the first two are the OpenAI fields of the same names, and
``repetition_penalty`` goes in ``extra_body``. Rows after speculative drafts count the
drafts before them as output. Cost: one ``bincount`` per penalised row.
"""

from __future__ import annotations

from specdec_repetition_penalty.plugin import RepetitionPenaltyPlugin

plugin = RepetitionPenaltyPlugin()

__all__ = ["RepetitionPenaltyPlugin", "plugin"]
