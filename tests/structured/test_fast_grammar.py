"""The direct reader of plain Lark grammars gives lark's terminals and LR automaton."""

from __future__ import annotations

import pytest
from lark.lexer import PatternStr
from lr_helpers import canonical_automaton

from specdec.structured.cfg.fast_grammar import fast_grammar
from specdec.structured.cfg.grammar import GrammarTables, _load_with_lark
from specdec.structured.cfg.lalr import LALRTable
from specdec.structured.errors import ConstraintError
from specdec.structured.json_schema import schema_to_lark

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
     "required": ["a"]},
    {"type": "array", "items": {"enum": ["x", 1, True, None]}, "minItems": 2},
    {"anyOf": [{"type": "boolean"}, {"type": "number", "minimum": 3, "maximum": 250}]},
    {"type": "integer", "multipleOf": 7},
    {},  # any JSON value: stars and groups
    {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 3},
]
GRAMMARS = [
    'start: a+ ("x" | "y")* [b c] "x"\na: "0" | "1" | A\nb: B?\nc: (a b)+ | "q"\n'
    "A: /[a-z]+/i\nB: \"lit\"\n",
    'start: x\nx: "{" [x ("," x)*] "}" | "[" x* "]"\n',
]


@pytest.mark.parametrize("text", [schema_to_lark(s) for s in SCHEMAS] + GRAMMARS)
def test_same_terminals_and_automaton_as_lark(text):
    fast = fast_grammar(text)
    assert fast is not None
    lark = _load_with_lark(text, [])
    fast_names = {n: repr(p) for n, p in fast.terminals}
    lark_names = {n: repr(p) for n, p, _ in lark.terminals}
    assert sorted(fast_names.values()) == sorted(lark_names.values())
    # same order where order decides ties (regex terminals); priorities all 0
    assert [p for _, p in fast.terminals if not isinstance(p, PatternStr)] == \
        [p for _, p, _ in lark.terminals if not isinstance(p, PatternStr)]
    assert all(priority == 0 for _, _, priority in lark.terminals)
    assert canonical_automaton(LALRTable(fast.parse_table), fast_names) == \
        canonical_automaton(LALRTable(lark.parse_table), lark_names)


@pytest.mark.parametrize("text", [
    'start: "a"\n%ignore " "\n',  # directives
    'start: x\n?x: "a"\n',  # rule modifiers
    'start: "a" // comment\n',
    'start: x\n',  # undefined rule: lark words the error
    'start: "a" -> alias\n',
    'start: A\nA: B "c"\nB: "b"\n',  # terminal composition
    'start: /[0-9]+/ "a"\n',  # anonymous regex: lark's order of terminals matters
])
def test_outside_the_subset_lark_decides(text):
    assert fast_grammar(text) is None


def test_invalid_grammar_still_gets_lark_error():
    with pytest.raises(ConstraintError, match="invalid Lark grammar"):
        GrammarTables("start: nope\n")
