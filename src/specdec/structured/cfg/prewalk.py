"""Vocabulary walks done at compile time, so that a first visit to a lexer state is cheap.

A mask miss costs one vocabulary walk per lexer state not seen before (see
:mod:`token_walk`). The dear ones start inside a long lexeme: in a JSON string nearly
every token stays inside, so the walk visits the whole vocabulary trie. Compiling a
grammar therefore walks, once, from

* every state of each terminal lexed alone: after the first byte of a lexeme usually
  one terminal is still alive, and such a state lexes the same in every lexer context;
* every state of the start context (with the basic lexer, the only context).

Walks are keyed by the live (terminal, terminal state) pairs, so they serve every
lexer context, and they are stored in the compile cache next to the grammar tables,
keyed by :func:`terminals_fingerprint` and the vocabulary.
"""

from __future__ import annotations

import hashlib

from specdec.structured.byte_trie import ByteTrie
from specdec.structured.cfg.lexer import LexerDFA, Terminal, build_lexer_dfa
from specdec.structured.cfg.token_walk import WalkResult, walk_from_root

WalkKey = tuple  # (live pairs,) for a walk over the whole vocabulary


def prewalk(terminals: list[Terminal], start_lexer: LexerDFA,
            trie: ByteTrie) -> dict[WalkKey, WalkResult]:
    """Whole-vocabulary walks from the states listed in the module docstring."""
    lexers = [build_lexer_dfa(terminals, frozenset([i])) for i in range(len(terminals))]
    walks: dict[WalkKey, WalkResult] = {}
    for lexer in [start_lexer, *lexers]:
        for q in range(1, lexer.num_states):  # state 0 (no lexeme yet) is context-specific
            key = (lexer.live[q],)
            if key not in walks:
                walks[key] = walk_from_root(lexer, q, trie)
    return walks


def terminals_fingerprint(terminals: list[Terminal]) -> str:
    """A hash of everything a walk depends on besides the vocabulary."""
    h = hashlib.blake2b(digest_size=16)
    for t in terminals:
        h.update(repr((t.name, t.rank, t.dfa.table.shape)).encode())
        h.update(t.dfa.table.tobytes())
        h.update(t.dfa.accepting.tobytes())
    return h.hexdigest()
