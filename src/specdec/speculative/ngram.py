"""N-gram (prompt lookup) proposer.

Finds the longest suffix of the request's tokens (between ``prompt_lookup_min``
and ``prompt_lookup_max`` long) that occurred earlier, and proposes the tokens
that followed that earlier occurrence. Worked example, k = 3::

    tokens:  {"name": "Ann", "age": 31} ... {"name": "
    suffix   {"name": "   matches at the start; the tokens after it,
    proposal Ann", "   are proposed as the drafts.

Vectorised with numpy over an incrementally grown token buffer: the candidates
are the earlier positions of the last token, extended backwards together; a step
costs O(history) in C plus O(max_n * candidates), never a Python scan.
"""

from __future__ import annotations

import numpy as np


class TokenHistory:
    """A request's prompt + output tokens in a growing int32 buffer."""

    def __init__(self, tokens: list[int]):
        self.buf = np.asarray(tokens, dtype=np.int32)
        self.size = len(tokens)

    def sync(self, prompt: list[int], output: list[int]) -> np.ndarray:
        total = len(prompt) + len(output)
        if total > self.size:
            new = output[self.size - len(prompt) :]
            if total > len(self.buf):
                grown = np.empty(max(2 * len(self.buf), total), dtype=np.int32)
                grown[: self.size] = self.buf[: self.size]
                self.buf = grown
            self.buf[self.size : total] = new
            self.size = total
        return self.buf[: self.size]


def propose_ngram(tokens: np.ndarray, k: int, n_min: int, n_max: int) -> list[int]:
    """Up to ``k`` tokens following the most recent longest earlier match of the suffix."""
    length = len(tokens)
    if length < n_min + 1 or k <= 0:
        return []
    cand = np.flatnonzero(tokens[: length - 1] == tokens[length - 1])  # earlier last tokens
    if cand.size == 0:
        return []
    match_len = np.ones(cand.size, dtype=np.int32)
    alive = np.ones(cand.size, dtype=bool)
    for d in range(1, min(n_max, length - 1)):
        pos = cand - d
        ok = alive & (pos >= 0)
        ok[ok] = tokens[pos[ok]] == tokens[length - 1 - d]
        match_len += ok
        alive = ok
        if not alive.any():
            break
    best = int(match_len.max())
    if best < n_min:
        return []
    start = int(cand[np.flatnonzero(match_len == best)[-1]]) + 1  # most recent longest match
    return tokens[start : start + k].tolist()
