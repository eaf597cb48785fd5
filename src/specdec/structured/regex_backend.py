"""Regex constraints on outlines-core: a byte-level DFA index over the whole vocabulary.

outlines-core compiles the regex to a DFA over *bytes* and, for every DFA state, the
tokens whose bytes keep the DFA alive and the state each one leads to (``Index``). We
hand it our byte vocabulary (see :mod:`specdec.structured.vocabulary`), so spaces (``Ġ``),
quotes, escapes and UTF-8 characters split across tokens are all matched exactly.

A matcher is then just a stack of DFA states; masks are cached per state.
"""

from __future__ import annotations

import numpy as np
from outlines_core import Index, Vocabulary

from specdec.structured.bitmask import pack_token_ids
from specdec.structured.errors import ConstraintError
from specdec.structured.matcher import StateStackMatcher
from specdec.structured.vocabulary import TokenVocabulary

FINISHED = -1  # pseudo DFA state after EOS


class CompiledRegex:
    """A regex compiled against one vocabulary; shared, read-only after construction."""

    def __init__(self, pattern: str, vocab: TokenVocabulary, index: Index | None = None):
        self.pattern = pattern
        self.vocab = vocab
        self.index = index if index is not None else build_index(pattern, vocab)
        self.initial_state = self.index.get_initial_state()
        self.final_states = frozenset(self.index.get_final_states())
        self._eos_outlines = _outlines_eos_id(vocab)
        self._masks: dict[int, np.ndarray] = {}

    def matcher(self) -> RegexMatcher:
        return RegexMatcher(self)

    def mask_for(self, state: int) -> np.ndarray:
        mask = self._masks.get(state)
        if mask is None:
            if state == FINISHED:
                ids: list[int] = []
            else:
                ids = [t for t in self.index.get_allowed_tokens(state) or ()
                       if t != self._eos_outlines]
                if state in self.final_states:
                    ids.extend(self.vocab.eos_token_ids)
            mask = pack_token_ids(ids, self.vocab.vocab_size)
            mask.setflags(write=False)
            self._masks[state] = mask
        return mask

    def next_state(self, state: int, token_id: int) -> int | None:
        if state == FINISHED:
            return None
        if token_id in self.vocab.eos_token_ids:
            return FINISHED if state in self.final_states else None
        if token_id == self._eos_outlines or self.vocab.token_bytes[token_id] is None:
            return None
        return self.index.get_next_state(state, token_id)


class RegexMatcher(StateStackMatcher):
    compiled: CompiledRegex

    def accept_token(self, token_id: int) -> bool:
        if not 0 <= token_id < self.vocab_size:
            return False
        nxt = self.compiled.next_state(self.states[-1], token_id)
        if nxt is None:
            return False
        self.states.append(nxt)
        return True

    def is_accepting(self) -> bool:
        return self.states[-1] in self.compiled.final_states

    def is_terminated(self) -> bool:
        return self.states[-1] == FINISHED or super().is_terminated()


def _outlines_eos_id(vocab: TokenVocabulary) -> int:
    """outlines-core wants one EOS id it owns; use an id no real token has."""
    return min(vocab.eos_token_ids) if vocab.eos_token_ids else vocab.vocab_size


def build_index(pattern: str, vocab: TokenVocabulary) -> Index:
    """Compile ``pattern`` with outlines-core; a bad regex is a ConstraintError."""
    try:
        import re

        re.compile(pattern)
    except re.error as exc:
        raise ConstraintError(f"invalid regex {pattern!r}: {exc}") from None
    mapping = vocab.bytes_to_ids()
    try:
        outlines_vocab = Vocabulary(_outlines_eos_id(vocab), mapping)
        index = Index(pattern, outlines_vocab)
    except Exception as exc:  # noqa: BLE001 - outlines raises plain exceptions
        raise ConstraintError(f"cannot compile regex {pattern!r}: {exc}") from None
    return index
