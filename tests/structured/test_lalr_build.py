"""The direct LALR(1) builder gives lark's automaton (up to state numbers), and lark's
error where lark has one."""

from __future__ import annotations

import pytest
from lark.common import ParserConf
from lark.exceptions import GrammarError
from lark.grammar import NonTerminal, Rule, Terminal
from lark.parsers.lalr_analysis import LALR_Analyzer
from lr_helpers import SUITE_ROOT, canonical_automaton, suite_grammars

from specdec.structured.cfg import fast_grammar as fg
from specdec.structured.cfg.lalr import LALRTable
from specdec.structured.cfg.lalr_build import ReduceConflict, build_lalr

GRAMMARS = [
    'start: a+ ("x" | "y")* [b c] "x"\na: "0" | "1" | A\nb: B?\nc: (a b)+ | "q"\n'
    'A: /[a-z]+/i\nB: "lit"\n',
    'start: x\nx: "{" [x ("," x)*] "}" | "[" x* "]"\n',
    'start: e\ne: e "+" t | t\nt: t "*" f | f\nf: "(" e ")" | "n"\n',  # left recursion
    'start: a b c\na: "x"?\nb: "y"?\nc: a b "z" | b\n',  # nullable chains (reads, includes)
    'start: "a" x | "a" y\nx: "b"\ny: "b"\n',  # LALR, not LR(0)
    'start: "i" start | "i" start "e" start | "o"\n',  # dangling else: shift wins
]


def _bnf(text: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """The BNF rules fast_grammar gives the table builder, with symbol kinds."""
    rules, terms = fg._parse(fg._tokens(text))
    builder = fg._Builder(terms)
    for name, alts in rules.items():
        builder.rule(name, alts)
    return fg._used_rules(builder.rules, "start")


def _lark_table(rules) -> LALRTable:
    symbols: dict[tuple[str, str], object] = {}
    order: dict[str, int] = {}
    lark_rules = []
    for origin, expansion in rules:
        index = order[origin] = order.get(origin, -1) + 1
        symbol = [symbols.setdefault((k, n), Terminal(n, filter_out=False) if k == "T"
                                     else NonTerminal(n)) for k, n in expansion]
        lark_rules.append(Rule(NonTerminal(origin), symbol, index))
    analysis = LALR_Analyzer(ParserConf(lark_rules, {}, ["start"]))
    analysis.compute_lalr()
    return LALRTable(analysis.parse_table)


def _automaton(table: LALRTable) -> tuple:
    return (*canonical_automaton(table), len(table.actions))


def _check_same(text: str) -> None:
    rules = _bnf(text)
    try:
        expected = _automaton(_lark_table(rules))
    except GrammarError:
        with pytest.raises(ReduceConflict):
            build_lalr([(o, tuple(n for _, n in e)) for o, e in rules])
        return
    got = _automaton(LALRTable(build_lalr([(o, tuple(n for _, n in e)) for o, e in rules])))
    assert got == expected


@pytest.mark.parametrize("text", GRAMMARS)
def test_same_automaton_as_lark(text):
    _check_same(text)


def test_reduce_reduce_conflict_is_refused_like_lark():
    text = 'start: x | y\nx: "a"\ny: "a"\n'
    with pytest.raises(GrammarError):
        _lark_table(_bnf(text))
    with pytest.raises(ReduceConflict):
        build_lalr([(o, tuple(n for _, n in e)) for o, e in _bnf(text)])
    assert fg.fast_grammar(text) is None  # lark loads it and words the error


@pytest.mark.skipif(not SUITE_ROOT.is_dir(), reason=f"JSON-Schema-Test-Suite not at {SUITE_ROOT}")
def test_same_automaton_as_lark_on_every_suite_grammar():
    checked = 0
    for text in suite_grammars():
        _check_same(text)
        checked += 1
    assert checked >= 550
