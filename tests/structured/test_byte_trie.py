"""The vocabulary trie must hold every token's bytes exactly, children contiguous."""

from __future__ import annotations

import numpy as np

from specdec.structured.byte_trie import ROOT, ByteTrie, build_byte_trie
from specdec.structured.vocabulary import token_vocabulary


def _spell(trie: ByteTrie, node: int, parent: np.ndarray) -> bytes:
    out = []
    while node != ROOT:
        out.append(int(trie.byte[node]))
        node = int(parent[node])
    return bytes(reversed(out))


def _parents(trie: ByteTrie) -> np.ndarray:
    parent = np.full(trie.num_nodes, -1)
    for p in range(trie.num_nodes):
        start = trie.child_start[p]
        parent[start:start + trie.num_children[p]] = p
    return parent


def test_small_trie_layout():
    tokens = [b"ab", None, b"a", b"b", b"ab", b"a\x00"]
    trie = build_byte_trie(tokens, vocab_size=8)
    parent = _parents(trie)
    assert trie.num_nodes == 5  # root, "a", "b", "a\0", "ab"
    assert [_spell(trie, int(n), parent) for n in trie.token_node[:6]] == [
        b"ab", b"", b"a", b"b", b"ab", b"a\x00"]
    assert trie.token_node[1] == ROOT and trie.token_node[6] == ROOT
    assert not trie.is_token[ROOT] and trie.is_token[1:].all()
    children, parent_index = trie.children(np.array([ROOT, trie.token_node[2]]))
    assert [_spell(trie, int(c), parent) for c in children] == [b"a", b"b", b"a\x00", b"ab"]
    assert parent_index.tolist() == [0, 0, 1, 1]


def test_every_token_is_spelled_by_its_node(tokenizer):
    vocab = token_vocabulary(tokenizer, 49152, frozenset([2]))
    trie = vocab.byte_trie
    parent = _parents(trie)
    for i in range(0, len(vocab.token_bytes), 7):
        assert _spell(trie, int(trie.token_node[i]), parent) == (vocab.token_bytes[i] or b"")


def test_tokens_at_lists_every_token_spelled_by_the_nodes():
    from specdec.structured.byte_trie import build_byte_trie

    token_bytes = [b"a", b"ab", b"b", b"ab", None, b"abc"]  # ids 1 and 3 share a node
    trie = build_byte_trie(token_bytes, len(token_bytes))
    node = trie.token_node
    assert sorted(trie.tokens_at(np.array([node[1]])).tolist()) == [1, 3]
    assert sorted(trie.tokens_at(np.array([node[0], node[5]])).tolist()) == [0, 5]
    assert trie.tokens_at(np.array([node[2]])).tolist() == [2]
    assert trie.tokens_at(np.array([], dtype=np.intp)).tolist() == []


def test_packed_tokens_at_equals_packing_tokens_at(tokenizer):
    from specdec.structured.bitmask import pack_bool_mask

    trie = token_vocabulary(tokenizer, 49152, frozenset([2])).byte_trie
    rng = np.random.default_rng(0)
    token_nodes = np.flatnonzero(trie.is_token)
    for n in (0, 1, 37, 4000, 5000):
        nodes = np.sort(rng.choice(token_nodes, n, replace=False))
        allowed = np.zeros(49152, dtype=bool)
        allowed[trie.tokens_at(nodes)] = True
        assert np.array_equal(trie.packed_tokens_at(nodes, 49152), pack_bool_mask(allowed))
    shared = build_byte_trie([b"a", b"a", b"b"], 3)  # one node, two ids
    node = shared.token_node[:1]
    assert shared.packed_tokens_at(node, 3).tolist() == [0b11]
