"""Push the whole vocabulary through a lexer DFA at once (numpy, no per-token Python).

The vocabulary is walked as a trie (:mod:`specdec.structured.byte_trie`): a prefix
shared by many tokens is fed once, and a subtree is dropped at the first byte the
lexer rejects. Starting from lexer state ``q`` (a partial lexeme), every token ends
one of three ways:

* **inside**: all its bytes extend the lexeme; whether it is allowed depends on the
  lexer state only, never on the parser stack (kept as a packed token mask);
* **boundary**: at some byte the lexeme cannot grow, its state has a winning terminal
  ``T``, so the lexeme closes as ``T`` and that byte starts a new lexeme; only here
  is the parser consulted (once per ``T``, for all such tokens together);
* **dead**: a byte the lexeme cannot take, in a state that is no complete terminal.

A boundary is recorded as the trie node of the byte that starts the new lexeme: the
tokens below that node are exactly the ones continuing there, and walking on from
that node (in the next lexer context) covers them all at once.

A walk's result does not depend on the parser stack, so it is cached per lexer state
(and per path of boundaries) and reused by every stack that reaches it.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from specdec.structured.byte_trie import ByteTrie
from specdec.structured.cfg.lexer import LexerDFA
from specdec.structured.native import Scratch, Trie, load_trie_walk


@dataclass
class WalkResult:
    packed: np.ndarray  # int32 [words], read-only: the tokens that end inside the lexeme
    boundaries: dict[int, np.ndarray]  # terminal -> int32 trie nodes starting the next lexeme

    def __getstate__(self) -> tuple:  # pickled for the compile cache
        return (self.packed, {t: nodes.astype(np.int32) for t, nodes in self.boundaries.items()})

    def __setstate__(self, state: tuple) -> None:
        self.packed, self.boundaries = state
        self.packed.setflags(write=False)


def walk(dfa: LexerDFA, start_state: int, nodes: np.ndarray, trie: ByteTrie) -> WalkResult:
    """Feed the byte of each trie node in ``nodes`` from ``start_state``, then their subtrees."""
    native = load_trie_walk()
    if native is not None:
        return _walk_native(native, dfa, start_state, nodes, trie)
    return walk_numpy(dfa, start_state, nodes, trie)


def _walk_native(native, dfa: LexerDFA, start_state: int, nodes: np.ndarray,
                 trie: ByteTrie) -> WalkResult:
    """:func:`walk_numpy` in C, depth first (the same sets, in another order)."""
    walker = _walkers.get(trie)
    if walker is None:
        walker = _walkers.put(trie, _NativeWalker(native, trie))
    return walker.walk(dfa, start_state, nodes)


class _ByIdentity:
    """Values kept for as long as their key object lives (keys need not be hashable)."""

    def __init__(self):
        self._entries: dict[int, tuple[weakref.ref, object]] = {}

    def get(self, key):
        entry = self._entries.get(id(key))
        return entry[1] if entry is not None and entry[0]() is key else None

    def put(self, key, value):
        identity = id(key)
        self._entries[identity] = (weakref.ref(key, lambda _: self._entries.pop(identity, None)),
                                   value)
        return value


class _NativeWalker:
    """The C walk bound to one trie: its int32 arrays, and scratch buffers per thread."""

    def __init__(self, native, trie: ByteTrie):
        self.native = native
        self.size = trie.num_nodes
        self.words = (trie.token_node.shape[0] + 31) // 32
        order, first, count = trie.tokens_by_node
        self.arrays = [np.ascontiguousarray(a, dtype=np.int32) for a in (
            trie.byte, trie.child_start, trie.num_children, first, count, order)]
        self.trie = Trie(*(a.ctypes.data for a in self.arrays))
        self.trie_address = ctypes.addressof(self.trie)
        self.local = threading.local()

    def _scratch(self, capacity: int) -> tuple:
        """This thread's scratch of at least ``capacity``: (capacity, buffers, struct,
        the struct's address)."""
        scratch = getattr(self.local, "scratch", None)
        if scratch is None or scratch[0] < capacity:
            capacity = max(capacity, 2 * self.size)
            arrays = [np.empty(capacity, dtype=np.int32) for _ in range(4)]
            struct = Scratch(*(a.ctypes.data for a in arrays), capacity)
            scratch = self.local.scratch = (capacity, arrays, struct, ctypes.addressof(struct))
        return scratch

    def walk(self, dfa: LexerDFA, start_state: int, nodes: np.ndarray) -> WalkResult:
        table, winner = dfa.native_tables
        nodes = np.ascontiguousarray(nodes, dtype=np.int32)
        _, (boundary_nodes, closing, _, _), struct, address = self._scratch(
            self.size + nodes.shape[0])
        packed = np.zeros(self.words, dtype=np.int32)
        status = self.native(table, winner, self.trie_address, address,
                             nodes.ctypes.data, nodes.shape[0], start_state, packed.ctypes.data)
        if status != 0:
            raise RuntimeError("trie walk stack overflow")
        packed.setflags(write=False)
        num_boundaries = struct.num_boundaries
        if not num_boundaries:
            return WalkResult(packed, {})
        ends = boundary_nodes[:num_boundaries].copy()
        if struct.closing_low == struct.closing_high:
            return WalkResult(packed, {struct.closing_low: ends})
        return WalkResult(packed, dict(_by_terminal(closing[:num_boundaries], ends)))


_walkers = _ByIdentity()


def walk_numpy(dfa: LexerDFA, start_state: int, nodes: np.ndarray,
               trie: ByteTrie) -> WalkResult:
    """:func:`walk` breadth first in numpy, one trie depth per iteration."""
    nodes = nodes.astype(np.intp)
    table = dfa.table.astype(np.intp).ravel()  # flat: [state * 256 + byte]
    winner = dfa.winner
    inside: list[np.ndarray] = []
    ends: dict[int, list[np.ndarray]] = {}
    rows = np.full(nodes.shape[0], start_state * 256, dtype=np.intp)  # state before node * 256
    while nodes.size:
        nxt = table[rows + trie.byte[nodes]]
        stuck = nxt < 0
        if stuck.any():
            closing = winner[rows[stuck] // 256]
            for terminal, group in _by_terminal(closing, nodes[stuck]):
                ends.setdefault(terminal, []).append(group)
            keep = ~stuck
            nodes, nxt = nodes[keep], nxt[keep]
        inside.append(nodes[trie.is_token[nodes]])
        nodes, parent_index = trie.children(nodes)
        rows = nxt[parent_index] * 256
    boundaries = {t: np.concatenate(parts).astype(np.int32) for t, parts in ends.items()}
    packed = trie.packed_tokens_at(np.concatenate(inside), trie.token_node.shape[0])
    packed.setflags(write=False)
    return WalkResult(packed, boundaries)


def walk_from_root(dfa: LexerDFA, start_state: int, trie: ByteTrie) -> WalkResult:
    """:func:`walk` over every token of the vocabulary."""
    return walk(dfa, start_state, trie.root_children, trie)


def _by_terminal(closing: np.ndarray, nodes: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Group ``nodes`` by the terminal their lexeme closes as (-1: dead, dropped)."""
    low, high = int(closing.min()), int(closing.max())
    if low == high:
        return [(low, nodes)] if low >= 0 else []
    return [(t, nodes[closing == t]) for t in sorted(set(closing[closing >= 0].tolist()))]
