"""The two levels of a constraint: a compiled grammar (shared) and a matcher (per request).

``compile_constraint`` returns a :class:`CompiledConstraint`, built once per
(constraint, tokenizer) and shared by every request that uses it. ``.matcher()`` gives a
:class:`Matcher`: the per-request position in the grammar. Speculative decoding needs
exactly these verbs: check drafts without committing (``validate_tokens`` or a
``copy()``), commit the accepted prefix (``accept_token``), undo (``rollback``).
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod

import numpy as np
import torch


class Matcher(ABC):
    """Per-request grammar state. Every verb says whether it mutates.

    EOS is allowed exactly when :meth:`is_accepting` is true.
    """

    max_rollback_tokens = 256  # how many accepted tokens ``rollback`` can undo

    @abstractmethod
    def accept_token(self, token_id: int) -> bool:
        """Advance over ``token_id`` if the grammar allows it; False leaves the state unchanged."""

    @abstractmethod
    def allowed_mask(self) -> np.ndarray:
        """The packed int32 mask of allowed next tokens (EOS included when accepting).

        Read-only and possibly shared with a cache: copy before editing. No mutation.
        """

    @abstractmethod
    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (at most ``max_rollback_tokens``)."""

    @abstractmethod
    def is_accepting(self) -> bool:
        """The text so far is complete: EOS may come next. No mutation."""

    @abstractmethod
    def copy(self) -> Matcher:
        """An independent matcher at the same position (cheap: tables are shared)."""

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @property
    @abstractmethod
    def num_accepted_tokens(self) -> int: ...

    def is_terminated(self) -> bool:
        """Nothing but EOS can follow: the output is complete and cannot grow. No mutation."""
        if not self.is_accepting():
            return False
        mask = self.allowed_mask().view(np.uint32).copy()
        for eos in self.eos_token_ids:
            mask[eos // 32] &= np.uint32(~(1 << (eos % 32)) & 0xFFFFFFFF)
        return not mask.any()

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset()

    def fill_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> None:
        """Write the allowed-token mask into row ``index`` of an int32 bitmask. No mutation."""
        mask = self.allowed_mask()
        target = _numpy_view(bitmask)[index]  # a CPU view: one memcpy, no tensor allocation
        if target.shape[0] == mask.shape[0]:
            np.copyto(target, mask)
            return
        n = min(target.shape[0], mask.shape[0])
        target[:n] = mask[:n]
        target[n:] = 0

    def allowed_token_ids(self) -> list[int]:
        """The ids allowed next, EOS included when accepting. No mutation."""
        bits = np.unpackbits(self.allowed_mask().view(np.uint8), bitorder="little")
        return np.flatnonzero(bits[: self.vocab_size]).tolist()

    def is_token_allowed(self, token_id: int) -> bool:
        if not 0 <= token_id < self.vocab_size:
            return False
        return bool((int(self.allowed_mask()[token_id // 32]) >> (token_id % 32)) & 1)

    def validate_tokens(self, token_ids: list[int]) -> int:
        """How many of ``token_ids`` (a prefix) would be accepted. No mutation."""
        probe = self.copy()
        for n, tok in enumerate(token_ids):
            if not probe.accept_token(tok):
                return n
        return len(token_ids)

    def accept_tokens(self, token_ids: list[int]) -> int:
        """Accept tokens while allowed; returns how many were accepted. Mutates."""
        for n, tok in enumerate(token_ids):
            if not self.accept_token(tok):
                return n
        return len(token_ids)


_last_view: tuple = (None, 0, None, None)  # (weak ref to a bitmask, data_ptr, layout, view)


def _numpy_view(bitmask: torch.Tensor) -> np.ndarray:
    """``bitmask.numpy()``, kept for the last bitmask seen while its storage, shape and
    strides are unchanged (every step of a decode loop fills the same one, and
    ``.numpy()`` costs more than copying a mask)."""
    global _last_view
    ref, address, layout, view = _last_view
    if (ref is None or ref() is not bitmask or bitmask.data_ptr() != address
            or (bitmask.shape, bitmask.stride()) != layout):
        view = bitmask.numpy()
        _last_view = (weakref.ref(bitmask), bitmask.data_ptr(),
                      (bitmask.shape, bitmask.stride()), view)
    return view


class StateStackMatcher(Matcher):
    """A matcher whose history is a stack of backend states: ``states[0]`` is the start,
    each accepted token pushes one state, rollback pops. ``compiled`` is the shared,
    immutable backend (vocabulary, tables, mask caches), so copies are cheap."""

    __slots__ = ("compiled", "states")

    def __init__(self, compiled, states: list | None = None):
        self.compiled = compiled
        self.states = states if states is not None else [compiled.initial_state]

    def allowed_mask(self) -> np.ndarray:
        return self.compiled.mask_for(self.states[-1])

    def rollback(self, num_tokens: int) -> None:
        if not 0 <= num_tokens <= min(len(self.states) - 1, self.max_rollback_tokens):
            raise ValueError(
                f"cannot roll back {num_tokens} tokens; {len(self.states) - 1} accepted, "
                f"at most {self.max_rollback_tokens} can be undone"
            )
        del self.states[len(self.states) - num_tokens :]

    def copy(self) -> StateStackMatcher:
        return type(self)(self.compiled, list(self.states))

    @property
    def vocab_size(self) -> int:
        return self.compiled.vocab.vocab_size

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self.compiled.vocab.eos_token_ids

    @property
    def num_accepted_tokens(self) -> int:
        return len(self.states) - 1
