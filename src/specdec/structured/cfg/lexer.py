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

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specdec.structured.cfg.byte_dfa import DEAD, ByteDFA
from specdec.structured.native import load_byte_classes, load_lexer_product

BYTEWISE_MEMBERS = 4  # products of more members are built over byte classes


@dataclass
class Terminal:
    name: str
    dfa: ByteDFA
    priority: int
    is_literal: bool  # a lark string terminal ("{", "select"i), not a regexp

    @property
    def rank(self) -> tuple[int, int]:
        return (self.priority, int(self.is_literal))


class LiveStates(Sequence):
    """``live[q]`` of a product DFA, built from its member states on first use (a large
    context has thousands of states; a mask reads a few)."""

    def __init__(self, keys: np.ndarray, order: list[int]):
        self._keys = keys  # int32 [num_states, members]: each member's state, DEAD if dead
        self._order = order  # terminal index of each member
        self._found: dict[int, tuple[tuple[int, int], ...]] = {}

    def __getitem__(self, q):
        if isinstance(q, slice):
            return [self[i] for i in range(len(self))[q]]
        found = self._found.get(q)
        if found is None:
            row = self._keys[q].tolist()
            found = self._found[q] = tuple((self._order[j], s) for j, s in enumerate(row)
                                           if s != DEAD)
        return found

    def __len__(self) -> int:
        return self._keys.shape[0]

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)


@dataclass
class LexerDFA:
    """The product DFA of some terminals; state 0 is the start (empty lexeme)."""

    table: np.ndarray  # int32 [num_states, 256], DEAD when the lexeme cannot grow by that byte
    winner: np.ndarray  # int32 [num_states]: terminal index the lexeme closes as, -1 if none
    # per state: the (terminal index, terminal DFA state) pairs still alive. States of
    # different lexers with the same pairs lex every continuation the same way.
    live: Sequence[tuple[tuple[int, int], ...]]

    @property
    def num_states(self) -> int:
        return self.table.shape[0]

    @functools.cached_property
    def native_tables(self) -> tuple[int, int]:
        """The addresses of ``table`` and ``winner`` as C int32 arrays (for native/)."""
        self.table = np.ascontiguousarray(self.table, dtype=np.int32)
        self.winner = np.ascontiguousarray(self.winner, dtype=np.int32)
        return self.table.ctypes.data, self.winner.ctypes.data


def build_lexer_dfa(terminals: list[Terminal], members: frozenset[int]) -> LexerDFA:
    """Combine ``terminals[i] for i in members`` into one DFA."""
    if len(members) == 1:  # the terminal's own DFA, without the product walk
        (index,) = members
        dfa = terminals[index].dfa
        winner = np.where(dfa.accepting, index, -1).astype(np.int32)
        return LexerDFA(dfa.table, winner, [((index, s),) for s in range(dfa.num_states)])
    if not members:  # nothing can follow: the start state alone, dead on every byte
        return LexerDFA(np.full((1, 256), DEAD, dtype=np.int32),
                        np.full(1, -1, dtype=np.int32), [()])
    order = sorted(members)
    native = load_lexer_product()
    if native is not None and len(order) <= BYTEWISE_MEMBERS:
        keys_array, table = _product_native(native, [terminals[i].dfa.table for i in order])
    elif native is not None:  # over byte classes: many members share most columns
        classes, representatives = _byte_classes([terminals[i].dfa.table for i in order])
        keys_array, targets = _product_native(
            native, [terminals[i].dfa.table[:, representatives] for i in order])
        table = targets[:, classes]
    else:
        classes, representatives = _byte_classes([terminals[i].dfa.table for i in order])
        # per member: next state by byte class, [num_states + 1, classes]; last row DEAD's
        tables = [_with_dead_row(terminals[i].dfa.table[:, representatives]) for i in order]
        keys, targets = _product_states(tables)
        keys_array, table = np.array(keys, dtype=np.int32), targets[:, classes]
    # highest rank wins, the first member among equals
    winners = np.full(keys_array.shape[0], -1, dtype=np.int32)
    by_rank = sorted(range(len(order)), key=lambda j: (
        tuple(-x for x in terminals[order[j]].rank), j))
    for j in by_rank:
        accepting = np.append(terminals[order[j]].dfa.accepting, False)[keys_array[:, j]]
        winners[accepting & (winners < 0)] = order[j]
    return LexerDFA(np.ascontiguousarray(table, dtype=np.int32), winners,
                    LiveStates(keys_array, order))


def _product_native(native, tables: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The product in C (native/lexer_product.c): (member states [n, k], table [n, 256])."""
    stacked = np.ascontiguousarray(np.concatenate(tables), dtype=np.int32)
    columns = stacked.shape[1]
    offsets = np.cumsum([0] + [t.shape[0] for t in tables[:-1]], dtype=np.int64)
    k = len(tables)
    capacity = 64
    while True:
        keys = np.empty((capacity, k), dtype=np.int32)
        out = np.empty((capacity, columns), dtype=np.int32)
        slots = np.zeros(4 * capacity, dtype=np.int32)  # a power of two >= 2 * capacity
        count = native(stacked.ctypes.data, offsets.ctypes.data, k, columns, keys.ctypes.data,
                       out.ctypes.data, capacity, slots.ctypes.data, slots.shape[0])
        if count >= 0:
            return keys[:count], out[:count]
        capacity *= 4


def _product_states(tables: list[np.ndarray]) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Breadth-first product of DFAs over byte classes, one BFS level per numpy round:
    the product states (a member state per DFA, DEAD when dead) numbered in the order a
    byte-by-byte walk finds them, and their transitions ``[states, classes]``."""
    members, num_classes = len(tables), tables[0].shape[1]
    start = (0,) * members
    ids = {start: 0}
    keys = [start]
    rows: list[np.ndarray] = []
    frontier = np.zeros((1, members), dtype=np.int32)
    while frontier.shape[0]:
        nexts = np.stack([t[frontier[:, j]] for j, t in enumerate(tables)], axis=2)
        flat = nexts.reshape(-1, members)  # (state, class) pairs in walk order
        alive = (flat != DEAD).any(axis=1)
        targets = np.full(flat.shape[0], DEAD, dtype=np.int32)
        found = []
        for k in np.flatnonzero(alive).tolist():
            key = tuple(flat[k].tolist())
            target = ids.get(key)
            if target is None:
                target = ids[key] = len(keys)
                keys.append(key)
                found.append(key)
            targets[k] = target
        rows.append(targets.reshape(-1, num_classes))
        frontier = np.array(found, dtype=np.int32).reshape(-1, members)
    return keys, np.concatenate(rows)


def _byte_classes(tables: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Bytes every table treats alike share a class: (class of each byte, the smallest
    byte of each class). The product walk then visits ~10-40 classes per state instead
    of 256 bytes."""
    native = load_byte_classes()
    if native is not None:
        stacked = np.ascontiguousarray(np.concatenate(tables, axis=0), dtype=np.int32)
        classes, first = np.empty(256, dtype=np.int32), np.empty(256, dtype=np.int32)
        count = native(stacked.ctypes.data, stacked.shape[0], classes.ctypes.data,
                       first.ctypes.data)
        return classes.astype(np.intp), first[:count].astype(np.intp)
    stacked = np.ascontiguousarray(np.concatenate(tables, axis=0).T)  # [256, all states]
    class_of: dict[bytes, int] = {}
    classes = np.array([class_of.setdefault(row.tobytes(), len(class_of)) for row in stacked],
                       dtype=np.intp)  # numbered by first byte: a byte-by-byte walk's order
    representatives = np.zeros(len(class_of), dtype=np.intp)
    representatives[classes[::-1]] = np.arange(255, -1, -1)  # the smallest byte wins
    return classes, representatives


def _with_dead_row(table: np.ndarray) -> np.ndarray:
    """``table`` with a last row of DEAD, so that ``table[DEAD]`` (index -1) is dead."""
    return np.vstack([table, np.full((1, table.shape[1]), DEAD, dtype=table.dtype)])
