"""The plugin object registered through the ``specdec`` entry point."""

from __future__ import annotations

from typing import Any

from specdec import hookimpl

NAME = "logit_bias"
MAX_BIAS = 100.0


class LogitBiasPlugin:
    """One instance per process (entry points load once); it keeps the tokenizer of the
    engine that started last, so engines with different tokenizers in one process are
    not supported."""

    def __init__(self) -> None:
        self.tokenizer = None
        self.vocab_size = 0

    @hookimpl
    def specdec_engine_started(self, context) -> None:
        self.tokenizer, self.vocab_size = context.tokenizer, context.vocab_size

    @hookimpl
    def specdec_request_options(self) -> list[str]:
        return ["logit_bias", "banned_phrases"]

    @hookimpl
    def specdec_request_added(self, request) -> None:
        extra = request.sampling_params.extra
        bias = self._parse_bias(extra.get("logit_bias"))
        phrases = self._tokenize_phrases(extra.get("banned_phrases"))
        if bias or phrases:
            request.plugin_data[NAME] = (bias, phrases)

    @hookimpl
    def specdec_logits(self, logits, rows) -> None:
        for i, row in enumerate(rows):
            state = row.request.plugin_data.get(NAME)
            if state is None:
                continue
            bias, phrases = state
            for token_id, value in bias.items():
                logits[i, token_id] += value
            if phrases:
                output = row.request.output_token_ids + row.draft_tokens_before
                for token_id in banned_next_tokens(output, phrases):
                    logits[i, token_id] = float("-inf")

    # ---------------------------------------------------------------- validation

    def _parse_bias(self, value: Any) -> dict[int, float]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError(f"logit_bias must be a mapping of token id to bias, got {value!r}")
        bias = {}
        for key, amount in value.items():
            try:
                token_id = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"logit_bias key {key!r} is not a token id") from None
            if not 0 <= token_id < self.vocab_size:
                raise ValueError(f"logit_bias token id {token_id} is outside the vocabulary "
                                 f"[0, {self.vocab_size})")
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) \
                    or not -MAX_BIAS <= amount <= MAX_BIAS:
                raise ValueError(f"logit_bias values must be numbers in [-100, 100], "
                                 f"got {amount!r}")
            bias[token_id] = float(amount)
        return bias

    def _tokenize_phrases(self, value: Any) -> list[tuple[int, ...]]:
        if value is None:
            return []
        if isinstance(value, str) or not isinstance(value, (list, tuple)) \
                or not all(isinstance(p, str) and p for p in value):
            raise ValueError(f"banned_phrases must be a list of non-empty strings, got {value!r}")
        sequences = set()
        for phrase in value:
            for text in (phrase, " " + phrase):
                ids = self.tokenizer.encode(text, add_special_tokens=False)
                if ids:
                    sequences.add(tuple(ids))
        return sorted(sequences)


def banned_next_tokens(output: list[int], phrases: list[tuple[int, ...]]) -> set[int]:
    """Tokens that would complete a banned phrase right after ``output``.

    >>> sorted(banned_next_tokens([5, 7, 8], [(7, 8, 9), (3,), (8, 4)]))
    [3, 4, 9]
    """
    banned = set()
    for phrase in phrases:
        prefix = phrase[:-1]
        if not prefix or tuple(output[len(output) - len(prefix):]) == prefix:
            banned.add(phrase[-1])
    return banned
