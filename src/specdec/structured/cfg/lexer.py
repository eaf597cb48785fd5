"""The contextual lexer as DFAs: one DFA per set of terminals a parser state accepts.

Like lark's contextual lexer, only the terminals the parser can take next (plus the
``%ignore`` ones) are lexed. Their byte DFAs are run in parallel (a product
construction, built breadth-first with numpy, one row of 256 bytes at a time).

Lexing is maximal munch with one byte of look-ahead: a lexeme continues while the
next byte can extend it; when it cannot, the lexeme closes as the *winning* terminal
of its state (highest priority, then string literals before patterns, so ``"select"``
beats ``NAME``), and the byte starts the next lexeme. This is deterministic, so the
lexer state is one integer per terminal set.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.structured.cfg.byte_dfa import DEAD, ByteDFA


@dataclass
class Terminal:
    name: str
    dfa: ByteDFA
    priority: int
    is_literal: bool  # a lark string terminal ("{", "select"i), not a regexp

    @property
    def rank(self) -> tuple[int, int]:
        return (self.priority, int(self.is_literal))


@dataclass
class LexerDFA:
    """The product DFA of some terminals; state 0 is the start (empty lexeme)."""

    table: np.ndarray  # int32 [num_states, 256], DEAD when the lexeme cannot grow by that byte
    winner: np.ndarray  # int32 [num_states]: terminal index the lexeme closes as, -1 if none
    # per state: the (terminal index, terminal DFA state) pairs still alive. States of
    # different lexers with the same pairs lex every continuation the same way.
    live: list[tuple[tuple[int, int], ...]]

    @property
    def num_states(self) -> int:
        return self.table.shape[0]


def build_lexer_dfa(terminals: list[Terminal], members: frozenset[int]) -> LexerDFA:
    """Combine ``terminals[i] for i in members`` into one DFA."""
    if len(members) == 1:  # the terminal's own DFA, without the product walk
        (index,) = members
        dfa = terminals[index].dfa
        winner = np.where(dfa.accepting, index, -1).astype(np.int32)
        return LexerDFA(dfa.table, winner, [((index, s),) for s in range(dfa.num_states)])
    order = sorted(members)
    tables = [terminals[i].dfa.table for i in order]
    accepting = [terminals[i].dfa.accepting for i in order]
    ranks = [terminals[i].rank for i in order]
    start = tuple([0] * len(order))
    ids = {start: 0}
    keys = [start]
    rows: list[np.ndarray] = []
    winners: list[int] = []
    i = 0
    while i < len(keys):
        key = keys[i]
        i += 1
        nexts = np.full((len(order), 256), DEAD, dtype=np.int32)
        best, best_rank = -1, None
        for j, s in enumerate(key):
            if s == DEAD:
                continue
            nexts[j] = tables[j][s]
            if accepting[j][s] and (best_rank is None or ranks[j] > best_rank):
                best, best_rank = order[j], ranks[j]
        winners.append(best)
        row = np.full(256, DEAD, dtype=np.int32)
        alive = (nexts != DEAD).any(axis=0)
        columns = nexts.T
        seen: dict[bytes, int] = {}
        for b in np.flatnonzero(alive):
            col = columns[b]
            raw = col.tobytes()
            target = seen.get(raw)
            if target is None:
                nkey = tuple(col.tolist())
                target = ids.get(nkey)
                if target is None:
                    target = ids[nkey] = len(keys)
                    keys.append(nkey)
                seen[raw] = target
            row[b] = target
        rows.append(row)
    live = [tuple((order[j], s) for j, s in enumerate(key) if s != DEAD) for key in keys]
    return LexerDFA(np.stack(rows), np.array(winners, dtype=np.int32), live)
