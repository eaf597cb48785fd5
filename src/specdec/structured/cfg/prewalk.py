"""Vocabulary walks done at compile time, so that a first visit to a lexer state is cheap.

A mask miss costs one vocabulary walk per lexer state not seen before (see
:mod:`token_walk`). Walks from states where one terminal alone is alive (after the
first byte of nearly every lexeme) do not depend on the grammar: they are done on
first use and shared by every grammar through :mod:`walk_store`, so compiling a new
schema does not repeat the JSON-string walks of the last one. What is left to do at
compile time are the start context's states where several terminals are still alive
(with the basic lexer, the only context).

Walks are keyed by the live (terminal, terminal state) pairs, so they serve every
lexer context, and they are stored in the compile cache next to the grammar tables,
keyed by :meth:`GrammarTables.terminals_fingerprint` and the vocabulary.
"""

from __future__ import annotations

from specdec.structured.byte_trie import ByteTrie
from specdec.structured.cfg.lexer import LexerDFA
from specdec.structured.cfg.token_walk import WalkResult, walk_from_root

WalkKey = tuple  # (live pairs,) for a walk over the whole vocabulary


def prewalk(start_lexer: LexerDFA, trie: ByteTrie) -> dict[WalkKey, WalkResult]:
    """Whole-vocabulary walks from the states listed in the module docstring."""
    walks: dict[WalkKey, WalkResult] = {}
    for q in range(1, start_lexer.num_states):  # state 0 (no lexeme yet): context-specific
        key = (start_lexer.live[q],)
        if len(key[0]) > 1 and key not in walks:
            walks[key] = walk_from_root(start_lexer, q, trie)
    return walks

