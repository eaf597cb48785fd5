"""Compile-time walks that make a new grammar's first masks dictionary hits.

On a JSON-schema grammar nearly every position of a document is a parser stack not
seen before, and its first mask would walk the vocabulary from lexer states not seen
before (~10 us each, a whole-vocabulary walk more). What does not depend on the stack
is done here, in the compile, within a time budget:

* the lexer context of LALR states' terminals (most are one terminal: cheap);
* walks from every cheap state of every terminal (inside a literal, a number, a
  punctuation mark: few tokens continue), into the process-wide store
  (:mod:`.walk_store`), as the dear ones are;
* for each shift of a terminal ``T`` to an LALR state, the walks that continue after
  ``T`` closes in the lexer context of that state (the tokens that cross the boundary:
  ``", "`` then a property name), two boundaries deep.

Walks are keyed exactly as :meth:`CompiledGrammar._collect` keys them (lexer contexts
included), so an entry made for a context that a stack never lexes is never read; a
wrong guess costs compile time, never a wrong mask. Keys that name lexer contexts stay
in this process: context numbers are not stable across processes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from specdec.structured.cfg.lexer import build_lexer_dfa
from specdec.structured.cfg.token_walk import walk_from_root
from specdec.structured.cfg.walk_store import SHARED

if TYPE_CHECKING:
    from specdec.structured.cfg.grammar import CompiledGrammar

DEAR_FANOUT = 64  # a lexer state this many bytes continue walks most of the vocabulary


def warm_up(grammar: CompiledGrammar, deadline: float) -> None:
    """All three, until ``time.perf_counter()`` passes ``deadline``."""
    if _cheap_walks(grammar, deadline):
        _boundary_walks(grammar, deadline)


def _cheap_walks(grammar: CompiledGrammar, deadline: float) -> bool:
    """The cheap single-terminal walks the shared store lacks; False: out of time."""
    tables = grammar.tables
    for index, terminal in enumerate(tables.terminals):
        fanout = (terminal.dfa.table >= 0).sum(axis=1)
        lexer = None
        for q in np.flatnonzero(fanout < DEAR_FANOUT).tolist():
            key = grammar.store_key(index, q)
            if q == 0 or SHARED.contains(key):
                continue
            if time.perf_counter() > deadline:
                return False
            lexer = lexer or build_lexer_dfa(tables.terminals, frozenset([index]))
            SHARED.put(key, walk_from_root(lexer, q, grammar.vocab.byte_trie))
    return True


def _boundary_walks(grammar: CompiledGrammar, deadline: float) -> None:
    """From each state of each LALR state's context where one terminal alone is alive
    and complete and the store has its walk: the walks over the tokens that cross a
    boundary, in the context of the LALR state the closed terminal shifts to; one
    boundary deep for all, then two (a property name's closing quote, the colon, the
    value's start)."""
    contexts: dict[int, int] = {}
    frontier = []
    for state in grammar.lalr.actions:
        if time.perf_counter() > deadline:
            return
        tset = contexts[state] = grammar.state_context(state)
        lexer = grammar.lexer(tset)
        for q in np.flatnonzero(lexer.winner >= 0).tolist():
            live = lexer.live[q]
            if len(live) == 1 and SHARED.contains(grammar.store_key(*live[0])):
                frontier.append((state, (live,), grammar.walk_at((live,), tset, q, None)))
    for _ in range(2):
        deeper = []
        for state, key, result in frontier:
            actions = grammar.lalr.actions[state]
            for terminal, nodes in result.boundaries.items():
                if terminal in grammar.tables.ignore:
                    target = state  # the parser does not see it
                else:
                    act = actions.get(grammar.tables.terminals[terminal].name)
                    if act is None or not act[0]:
                        continue  # a reduce: where it leads depends on the stack
                    target = act[1]
                if time.perf_counter() > deadline:
                    return
                if target not in contexts:
                    contexts[target] = grammar.state_context(target)
                next_key = key + (terminal, contexts[target])
                deeper.append((target, next_key,
                               grammar.walk_at(next_key, contexts[target], 0, nodes)))
        frontier = deeper
