"""The vocabulary as a trie of byte strings, laid out as flat numpy arrays.

Walking a DFA over the trie instead of over each token shares the work of common
prefixes (49152 SmolLM2 tokens hold 332k bytes but only 100k distinct prefixes) and
prunes a whole subtree at the first byte the DFA rejects.

Layout, for tokens ``b"a"``, ``b"ab"``, ``b"b"``::

    node    0 (root)   1 "a"   2 "b"   3 "ab"
    byte    -          97      98      98
    parent  -1         0       0       1
    children of node p: nodes child_start[p] : child_start[p] + num_children[p]

Nodes are numbered breadth-first and, within a depth, in byte order, so the children
of a node are contiguous and the children of a sorted set of nodes come out sorted.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

ROOT = 0


@dataclass
class ByteTrie:
    # Index arrays are intp: numpy converts any other integer type on every fancy index.
    byte: np.ndarray  # intp [num_nodes]: the last byte of the node's prefix (0 for the root)
    child_start: np.ndarray  # intp [num_nodes]: first child
    num_children: np.ndarray  # intp [num_nodes]
    is_token: np.ndarray  # bool [num_nodes]: some token's bytes are exactly this prefix
    token_node: np.ndarray  # intp [vocab_size]: the node of a token's bytes (ROOT: no bytes)

    @property
    def num_nodes(self) -> int:
        return self.byte.shape[0]

    def children(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All children of ``nodes`` and, for each child, its parent's index in ``nodes``."""
        counts = self.num_children[nodes]
        total = int(counts.sum())
        ends = np.cumsum(counts)
        parent_index = np.repeat(np.arange(nodes.shape[0]), counts)
        first = self.child_start[nodes] - (ends - counts)
        return first[parent_index] + np.arange(total), parent_index

    @functools.cached_property
    def root_children(self) -> np.ndarray:
        """The nodes of the first bytes of all tokens (where a whole-vocabulary walk starts)."""
        first = self.child_start[ROOT]
        return np.arange(first, first + self.num_children[ROOT], dtype=np.int32)

    @functools.cached_property
    def tokens_by_node(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(token ids sorted by node, first index per node, count per node)."""
        order = np.argsort(self.token_node, kind="stable")
        order = order[self.token_node[order] != ROOT]
        nodes = self.token_node[order]
        first = np.searchsorted(nodes, np.arange(self.num_nodes))
        count = np.bincount(nodes, minlength=self.num_nodes)
        return order, first, count

    @functools.cached_property
    def _single_token(self) -> np.ndarray:
        """Per node: the one token spelled exactly by it, -1 when none or several."""
        order, first, count = self.tokens_by_node
        single = np.full(self.num_nodes, -1, dtype=np.intp)
        ones = np.flatnonzero(count == 1)
        single[ones] = order[first[ones]]
        return single

    def packed_tokens_at(self, nodes: np.ndarray, vocab_size: int) -> np.ndarray:
        """The packed int32 token mask (:mod:`~specdec.structured.bitmask` layout) of
        :meth:`tokens_at`; small sets set their bits directly, without a bool vector."""
        words = (vocab_size + 31) // 32
        if nodes.shape[0] > 4096:
            allowed = np.zeros(words * 32, dtype=bool)
            allowed[self.tokens_at(nodes)] = True
            return np.packbits(allowed, bitorder="little").view(np.int32)
        ids = self._single_token[nodes]
        if (ids < 0).any():
            ids = self.tokens_at(nodes)
        mask = np.zeros(words, dtype=np.uint32)
        np.bitwise_or.at(mask, ids >> 5, np.left_shift(1, ids & 31).astype(np.uint32))
        return mask.view(np.int32)

    def tokens_at(self, nodes: np.ndarray) -> np.ndarray:
        """The ids of the tokens spelled exactly by ``nodes`` (several ids may share one)."""
        order, first, count = self.tokens_by_node
        counts = count[nodes]
        if counts.max(initial=0) <= 1:
            return order[first[nodes[counts == 1]]]
        total = int(counts.sum())
        ends = np.cumsum(counts)
        index = np.repeat(first[nodes] - (ends - counts), counts) + np.arange(total)
        return order[index]


def build_byte_trie(token_bytes: list[bytes | None], vocab_size: int) -> ByteTrie:
    """The trie of every non-empty ``token_bytes[i]`` (vectorised over depths)."""
    ids = [i for i, b in enumerate(token_bytes) if b]
    ids.sort(key=lambda i: token_bytes[i])  # lexicographic: shared prefixes are adjacent
    n = len(ids)
    token_node = np.full(vocab_size, ROOT, dtype=np.intp)
    if not n:
        empty = np.zeros(1, dtype=np.intp)
        return ByteTrie(empty, empty + 1, empty, empty.astype(bool), token_node)
    lengths = np.array([len(token_bytes[i]) for i in ids], dtype=np.int32)
    width = int(lengths.max()) if n else 0
    matrix = np.zeros((n, width), dtype=np.uint8)
    for row, i in enumerate(ids):
        matrix[row, : lengths[row]] = np.frombuffer(token_bytes[i], dtype=np.uint8)
    # lcp[r]: bytes row r shares with row r - 1 (a new node starts at every depth >= lcp).
    lcp = np.zeros(n, dtype=np.int32)
    if n > 1:
        same = matrix[1:] == matrix[:-1]
        first_diff = np.where(same.all(axis=1), width, same.argmin(axis=1))
        lcp[1:] = np.minimum(first_diff, np.minimum(lengths[1:], lengths[:-1]))
    depth = np.arange(width, dtype=np.int32)[:, None]  # [width, 1]
    present = depth < lengths[None, :]  # [width, n]: row r has a byte at this depth
    starts = present & (depth >= lcp[None, :])  # row r is the first row of this node
    node_of = np.cumsum(starts.ravel(), dtype=np.intp).reshape(starts.shape)  # root = 0
    num_nodes = int(node_of[-1, -1]) + 1
    byte = np.zeros(num_nodes, dtype=np.intp)
    parent = np.full(num_nodes, -1, dtype=np.intp)
    byte[node_of[starts]] = matrix.T[starts]
    parent[node_of[0][starts[0]]] = ROOT
    parent[node_of[1:][starts[1:]]] = node_of[:-1][starts[1:]]
    num_children = np.bincount(parent[1:], minlength=num_nodes)
    child_start = np.searchsorted(parent[1:], np.arange(num_nodes)) + 1
    token_node[np.array(ids, dtype=np.int64)] = node_of[lengths - 1, np.arange(n)]
    is_token = np.zeros(num_nodes, dtype=bool)
    is_token[token_node] = True
    is_token[ROOT] = False
    return ByteTrie(byte, child_start, num_children, is_token, token_node)
