"""Compile-time walks that make a new grammar's first masks dictionary hits.

On a JSON-schema grammar nearly every position of a document is a parser stack not
seen before, and its first mask would walk the vocabulary from lexer states not seen
before (~10 us each, a whole-vocabulary walk more). What does not depend on the stack
is done here, in the compile, within a time budget:

* the lexer context of every LALR state's terminals (most are one terminal: free);
* walks from every cheap state of every terminal (inside a literal, a number, a
  punctuation mark: few tokens continue), into the process-wide store
  (:mod:`.walk_store`), as the dear ones are;
* for each shift of a terminal ``T`` to an LALR state, the walk that continues after
  ``T`` closes in the lexer context of that state (the tokens that cross the boundary:
  ``", "`` then a property name).

Walks are keyed exactly as :meth:`CompiledGrammar._collect` keys them (lexer contexts
included), so an entry made for a context that a stack never lexes is never read; a
wrong guess costs compile time, never a wrong mask. Keys that name lexer contexts stay
in this process: context numbers are not stable across processes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from specdec.structured.cfg.lalr import END
from specdec.structured.cfg.lexer import build_lexer_dfa
from specdec.structured.cfg.token_walk import walk_from_root
from specdec.structured.cfg.walk_store import SHARED

if TYPE_CHECKING:
    from specdec.structured.cfg.grammar import CompiledGrammar

DEAR_FANOUT = 64  # a lexer state this many bytes continue walks most of the vocabulary


def warm_up(grammar: CompiledGrammar, deadline: float) -> None:
    """All three, until ``time.perf_counter()`` passes ``deadline``."""
    contexts = {state: grammar.state_context(state) for state in grammar.lalr.actions}
    if _cheap_walks(grammar, deadline):
        _boundary_walks(grammar, contexts, deadline)


def _cheap_walks(grammar: CompiledGrammar, deadline: float) -> bool:
    """The cheap single-terminal walks the shared store lacks; False: out of time."""
    tables = grammar.tables
    for index, terminal in enumerate(tables.terminals):
        fanout = (terminal.dfa.table >= 0).sum(axis=1)
        lexer = None
        for q in np.flatnonzero(fanout < DEAR_FANOUT).tolist():
            key = (grammar.vocab.fingerprint, tables.terminal_keys[index], q)
            if q == 0 or SHARED.contains(key):
                continue
            if time.perf_counter() > deadline:
                return False
            lexer = lexer or build_lexer_dfa(tables.terminals, frozenset([index]))
            SHARED.put(key, walk_from_root(lexer, q, grammar.vocab.byte_trie))
    return True


def _boundary_walks(grammar: CompiledGrammar, contexts: dict[int, int],
                    deadline: float) -> None:
    """For each shift of ``T`` from LALR state ``s`` to ``t``: from each state of ``s``'s
    context where one terminal, ``T``, is alive and complete, the walk over the tokens
    that cross the boundary, in ``t``'s context."""
    index = grammar.tables.index
    for state, actions in grammar.lalr.actions.items():
        tset = contexts[state]
        lexer = grammar.lexer(tset)
        for name, (is_shift, target) in actions.items():
            if not is_shift or name == END:
                continue
            terminal, next_tset = index[name], contexts[target]
            for q in np.flatnonzero(lexer.winner == terminal).tolist():
                if len(lexer.live[q]) != 1:
                    continue
                if time.perf_counter() > deadline:
                    return
                key = (lexer.live[q],)
                nodes = grammar.walk_at(key, tset, q, None).boundaries.get(terminal)
                if nodes is not None:
                    grammar.walk_at(key + (terminal, next_tset), next_tset, 0, nodes)
