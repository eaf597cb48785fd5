"""The product lexer DFA built over byte classes equals the byte-by-byte construction."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specdec.structured.cfg.byte_dfa import DEAD
from specdec.structured.cfg.grammar import GrammarTables
from specdec.structured.cfg.lexer import build_lexer_dfa
from specdec.structured.json_schema import schema_to_lark

SCHEMA = {"type": "object", "properties": {
    "a": {"type": "string", "maxLength": 3}, "b": {"type": "number"},
    "c": {"enum": ["x", "xy", 1]}, "d": {"type": "string", "format": "date"}},
    "additionalProperties": {"type": "integer"}}
GRAMMAR = 'start: (K | N | W)+\nK: "select"i\nN: /[a-z]+/\nW: / +/\n'


def _reference(terminals, members):
    """Breadth first over bytes, one product state at a time (the plain construction)."""
    order = sorted(members)
    start = (0,) * len(order)
    ids, keys, rows, winners = {start: 0}, [start], [], []
    for key in keys:  # grows while visited
        best, best_rank = -1, None
        row = np.full(256, DEAD, dtype=np.int32)
        for j, s in enumerate(key):
            dfa = terminals[order[j]].dfa
            if s != DEAD and dfa.accepting[s] and (best_rank is None
                                                   or terminals[order[j]].rank > best_rank):
                best, best_rank = order[j], terminals[order[j]].rank
        for byte in range(256):
            nkey = tuple(int(terminals[i].dfa.table[s, byte]) if s != DEAD else DEAD
                         for i, s in zip(order, key, strict=True))
            if any(s != DEAD for s in nkey):
                row[byte] = ids.setdefault(nkey, len(keys))
                if row[byte] == len(keys):
                    keys.append(nkey)
        rows.append(row)
        winners.append(best)
    return np.stack(rows), np.array(winners), keys


@pytest.mark.parametrize("text", [schema_to_lark(SCHEMA), GRAMMAR])
def test_same_automaton_as_the_bytewise_product(text):
    terminals = GrammarTables(text).terminals
    subsets = [frozenset(c) for n in (2, 3) for c in itertools.combinations(
        range(len(terminals)), n)][:40] + [frozenset(range(len(terminals))), frozenset()]
    for members in subsets:
        lexer = build_lexer_dfa(terminals, members)
        if not members:
            assert lexer.num_states == 1 and (lexer.table == DEAD).all()
            continue
        table, winners, keys = _reference(terminals, members)
        assert np.array_equal(lexer.table, table) and np.array_equal(lexer.winner, winners)
        order = sorted(members)
        assert lexer.live == [tuple((order[j], s) for j, s in enumerate(k) if s != DEAD)
                              for k in keys]


def test_native_byte_classes_equal_the_python_ones(monkeypatch):
    import specdec.structured.cfg.lexer as lexer_module

    rng = np.random.default_rng(0)
    cases = []
    for rows in (1, 3, 40, 300):
        table = rng.integers(-1, 6, size=(rows, 256)).astype(np.int32)
        table[:, 97:123] = table[:, 97:98]  # a class of 26 bytes
        table[:, 200:] = table[:, 10:11]
        cases.append([table[: rows // 2 + 1], table[rows // 2 + 1:]] if rows > 1 else [table])
    native = [lexer_module._byte_classes(tables) for tables in cases]
    monkeypatch.setattr(lexer_module, "load_byte_classes", lambda: None)
    for tables, (classes, first) in zip(cases, native, strict=True):
        reference_classes, reference_first = lexer_module._byte_classes(tables)
        assert np.array_equal(classes, reference_classes)
        assert np.array_equal(first, reference_first)
