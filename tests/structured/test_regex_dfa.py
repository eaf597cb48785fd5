"""Plain patterns built directly accept exactly what interegular's construction does."""

from __future__ import annotations

import pytest
from lr_helpers import SUITE_ROOT, suite_grammars
from test_counted_dfa import equivalent

from specdec.structured.cfg.byte_dfa import _general_dfa, regex_to_byte_dfa
from specdec.structured.cfg.fast_grammar import fast_grammar
from specdec.structured.cfg.regex_dfa import Unsupported, plain_regex_dfa

PLAIN = [
    "a.b", ".*", "é+|ü", "(?:ab|c){5,}", "[a-z]{4,10}", "x(?:[0-9]){4}y", "(?:é|ü){4,6}z",
    r"\.", "a{2}", "a{0}", "a{3,}", "[-a]", "[a-]", "[a-c-e]", "a|", "(|a)b", "()", r"x\{",
    "[^é]x", "[à-ÿ]+", "[^à-ÿ]+", "[^\u2028-\u2029\"]*", "[^\x00-\x1f\"\\\\]",
    r"\x22(?:[^\x22\\\x00-\x1f]|\\[\x22\\\/bfnrt]|\\u[0-9a-fA-F]{4})*\x22",
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", r"9007199254740992(?:\.0+)?",
    '"(?:|[^"\\\\\x00-\x1fv][^"\\\\\x00-\x1f]*|v(?:|[^"\\\\\x00-\x1fa][^"\\\\\x00-\x1f]*))"',
    "[\t\n\r ]*", "\U0001F600|[^a]",
]
UNSUPPORTED = [r"\d+", "^a", "a$", "(?i)a", "(?=a)b", "a*?", "a++", "a{,3}", r"\u00e9",
               "[]a]", "[[]", r"[\b]", "(?P<x>a)", "a{65}"]


@pytest.mark.parametrize("pattern", PLAIN)
def test_same_language_as_the_general_construction(pattern):
    direct = plain_regex_dfa(pattern)
    assert equivalent(direct, _general_dfa(pattern))
    assert direct.num_states <= _general_dfa(pattern).num_states  # minimal


@pytest.mark.parametrize("pattern", UNSUPPORTED)
def test_outside_the_subset_is_left_to_interegular(pattern):
    with pytest.raises(Unsupported):
        plain_regex_dfa(pattern)


def test_start_is_state_zero_and_dead_ends_are_trimmed():
    dfa = plain_regex_dfa("ab|ac")
    assert not dfa.accepting[0]
    assert dfa.num_states == 3  # start, after "a", accepting




@pytest.mark.skipif(not SUITE_ROOT.is_dir(), reason=f"JSON-Schema-Test-Suite not at {SUITE_ROOT}")
def test_every_suite_terminal_matches_the_general_construction():
    patterns = set()
    for text in suite_grammars():
        loaded = fast_grammar(text)
        patterns.update(p.to_regexp() for _, p in loaded.terminals)
    assert len(patterns) > 100
    for pattern in sorted(patterns):
        assert equivalent(regex_to_byte_dfa(pattern), _general_dfa(pattern)), pattern
