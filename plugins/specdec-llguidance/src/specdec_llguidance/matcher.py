"""``LLGuidanceMatcher``: an ``llguidance.LLMatcher`` behind specdec's :class:`Matcher` verbs.

Two differences of ``LLMatcher`` are hidden here:

- a rejected token puts it in a permanent error state, while ``accept_token`` must
  leave the state unchanged: every token is checked with ``validate_tokens`` first;
- EOS is not part of its rollback history once the grammar has stopped. EOS is kept
  here instead (``finished``): allowed exactly when the text is complete, nothing after
  it, and ``rollback`` undoes it like any other token.

Masks are llguidance's packed int32 words (bit ``i % 32`` of word ``i // 32``), the
layout of :mod:`specdec.structured.bitmask`; EOS bits are set exactly when accepting.
"""

from __future__ import annotations

import llguidance
import numpy as np
import torch

from specdec.structured.bitmask import num_words
from specdec.structured.matcher import Matcher


def fresh_mask(inner: llguidance.LLMatcher, vocab_size: int) -> np.ndarray:
    """The allowed-token mask of ``inner``'s current state, computed now."""
    mask = np.zeros(num_words(vocab_size), dtype=np.int32)
    inner.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
    return mask


class LLGuidanceMatcher(Matcher):
    """One request's position in an llguidance grammar (see the module doc)."""

    __slots__ = ("inner", "compiled", "finished", "_num_tokens", "_mask")

    def __init__(self, inner: llguidance.LLMatcher, compiled, finished: bool = False,
                 num_tokens: int = 0, mask: np.ndarray | None = None):
        self.inner = inner
        self.compiled = compiled  # CompiledLLGuidance: vocab size and EOS ids
        self.finished = finished  # EOS was accepted
        self._num_tokens = num_tokens  # accepted tokens, EOS included
        self._mask = mask  # the current state's mask once computed (read-only)

    # ----------------------------------------------------------- mutating

    def accept_token(self, token_id: int) -> bool:
        if self.finished or not 0 <= token_id < self.vocab_size:
            return False
        if token_id in self.eos_token_ids:
            if not self.inner.is_accepting():
                return False
            self.finished = True
        elif self.inner.validate_tokens([token_id]) != 1 or not self.inner.consume_token(token_id):
            return False
        self._advanced(1)
        return True

    def accept_tokens(self, token_ids: list[int]) -> int:
        n = self._num_valid_text_tokens(token_ids)
        if n and not self.inner.consume_tokens(token_ids[:n]):
            raise RuntimeError(f"llguidance refused tokens it validated: {self.inner.get_error()}")
        if n:
            self._advanced(n)
        if n < len(token_ids) and self.accept_token(token_ids[n]):  # EOS, or nothing
            n += 1
        return n

    def rollback(self, num_tokens: int) -> None:
        if not 0 <= num_tokens <= min(self._num_tokens, self.max_rollback_tokens):
            raise ValueError(f"cannot roll back {num_tokens} tokens; "
                             f"{self._num_tokens} accepted")
        left = num_tokens
        if left and self.finished:
            self.finished, left = False, left - 1
        if left and not self.inner.rollback(left):
            raise RuntimeError(f"llguidance could not roll back: {self.inner.get_error()}")
        self._num_tokens -= num_tokens
        self._mask = None

    def _advanced(self, num_tokens: int) -> None:
        self._num_tokens += num_tokens
        self._mask = None

    # ------------------------------------------------------- no mutation

    def validate_tokens(self, token_ids: list[int]) -> int:
        n = self._num_valid_text_tokens(token_ids)
        if n == len(token_ids) or token_ids[n] not in self.eos_token_ids:
            return n
        if n == 0:
            return int(self.is_accepting())
        probe = self.copy()  # is the text complete after the first n tokens?
        probe.inner.consume_tokens(token_ids[:n])
        return n + int(probe.inner.is_accepting())

    def _num_valid_text_tokens(self, token_ids: list[int]) -> int:
        """How many leading tokens llguidance takes (EOS and out-of-range ids stop it)."""
        if self.finished or not token_ids:
            return 0
        end = next((i for i, t in enumerate(token_ids)
                    if t in self.eos_token_ids or not 0 <= t < self.vocab_size), len(token_ids))
        return self.inner.validate_tokens(token_ids[:end]) if end else 0

    def allowed_mask(self) -> np.ndarray:
        if self._mask is None:
            if self.finished:
                mask = np.zeros(num_words(self.vocab_size), dtype=np.int32)
            else:
                mask = fresh_mask(self.inner, self.vocab_size)
            mask.setflags(write=False)
            self._mask = mask
        return self._mask

    def fill_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> None:
        row = bitmask[index].numpy()  # a CPU view of the row
        direct = row.shape[0] == num_words(self.vocab_size) and row.flags["C_CONTIGUOUS"]
        if direct and self._mask is None and not self.finished:
            self.inner.unsafe_compute_mask_ptr(row.ctypes.data, row.nbytes)  # straight in
            return
        super().fill_bitmask(bitmask, index)

    def is_accepting(self) -> bool:
        return not self.finished and self.inner.is_accepting()

    def is_terminated(self) -> bool:
        """Complete, and llguidance says no more text can follow (only EOS)."""
        return self.is_accepting() and self.inner.is_stopped()

    def copy(self) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(self.inner.deep_copy(), self.compiled, self.finished,
                                 self._num_tokens, self._mask)

    @property
    def vocab_size(self) -> int:
        return self.compiled.vocab_size

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self.compiled.eos_token_ids

    @property
    def num_accepted_tokens(self) -> int:
        return self._num_tokens
