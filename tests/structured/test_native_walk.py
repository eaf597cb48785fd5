"""The C trie walk finds exactly what the numpy walk finds, from every kind of state."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.structured.cfg.grammar import GrammarTables
from specdec.structured.cfg.lexer import build_lexer_dfa
from specdec.structured.cfg.token_walk import walk, walk_from_root, walk_numpy
from specdec.structured.json_schema import schema_to_lark
from specdec.structured.native import load_trie_walk
from specdec.structured.vocabulary import token_vocabulary

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0},
    "mail": {"type": "string", "format": "email"}, "score": {"type": "number"},
    "tags": {"type": "array", "items": {"enum": ["a", "b c", "é"]}}}}


@pytest.fixture(scope="module")
def trie(tokenizer):
    return token_vocabulary(tokenizer, 49152, frozenset([2])).byte_trie


def _same(native, reference) -> None:
    assert np.array_equal(native.packed, reference.packed)
    assert native.boundaries.keys() == reference.boundaries.keys()
    for terminal, nodes in reference.boundaries.items():
        assert sorted(native.boundaries[terminal].tolist()) == sorted(nodes.tolist())


def test_native_walk_is_built_here():
    assert load_trie_walk() is not None  # a C compiler is part of the set-up


def test_native_and_numpy_walks_agree_on_every_lexer_state(trie):
    tables = GrammarTables(schema_to_lark(SCHEMA))
    everything = build_lexer_dfa(tables.terminals, frozenset(range(len(tables.terminals))))
    lexers = [everything] + [build_lexer_dfa(tables.terminals, frozenset([i]))
                             for i in range(len(tables.terminals))]
    rng = np.random.default_rng(0)
    compared = 0
    for lexer in lexers:
        for state in range(lexer.num_states):
            first = trie.child_start[0]
            top = np.arange(first, first + trie.num_children[0])
            _same(walk_from_root(lexer, state, trie), walk_numpy(lexer, state, top, trie))
            some = np.sort(rng.choice(trie.num_nodes - 1, size=50, replace=False) + 1)
            reference = walk_numpy(lexer, state, some, trie)
            _same(walk(lexer, state, some, trie), reference)
            compared += 2
    assert compared > 100
