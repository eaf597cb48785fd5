"""Counted repetitions built directly accept exactly what the general construction does."""

from __future__ import annotations

import pytest

from specdec.structured.cfg.byte_dfa import DEAD, ByteDFA, _general_dfa, regex_to_byte_dfa
from specdec.structured.cfg.counted import NotComposable, composed_dfa, split_counted
from specdec.structured.json_schema import _COUNTED_CHAR


def equivalent(a: ByteDFA, b: ByteDFA) -> bool:
    """Same language: walk the pair automaton over every byte from both starts."""
    seen = {(0, 0)}
    todo = [(0, 0)]
    while todo:
        x, y = todo.pop()
        if (x != DEAD and a.accepting[x]) != (y != DEAD and b.accepting[y]):
            return False
        for byte in range(256):
            pair = (int(a.table[x, byte]) if x != DEAD else DEAD,
                    int(b.table[y, byte]) if y != DEAD else DEAD)
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return True


COMPOSABLE = [
    f'"{_COUNTED_CHAR}{{0,20}}"', f'"{_COUNTED_CHAR}{{3,7}}"', f'"{_COUNTED_CHAR}{{5,}}"',
    f'"{_COUNTED_CHAR}{{4,}}"', f'"{_COUNTED_CHAR}{{6}}"', "[a-z]{4,10}", "(?:ab|c){5,}",
    "x(?:[0-9]){4}y", "[0-9]{4}-[0-9]{2}", "(?:é|ü){4,6}z", "(?:[0-9]{2}){4,8}",
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}", "(?:a*b){4}",
]
# not prefix-free, or the next piece's first byte could continue the repetition
NOT_COMPOSABLE = ["(?:a|ab){4,5}", "a(?:b|bc){4}", "[^a]{5,9}x", "[a-z]{4,}[a-c]"]


@pytest.mark.parametrize("pattern", COMPOSABLE)
def test_composed_dfa_equals_the_general_construction(pattern):
    composed = composed_dfa(pattern, _general_dfa)
    assert equivalent(composed, _general_dfa(pattern))
    assert equivalent(regex_to_byte_dfa(pattern), _general_dfa(pattern))


@pytest.mark.parametrize("pattern", NOT_COMPOSABLE)
def test_pieces_that_are_not_prefix_free_fall_back(pattern):
    with pytest.raises(NotComposable):
        composed_dfa(pattern, _general_dfa)
    assert equivalent(regex_to_byte_dfa(pattern), _general_dfa(pattern))


@pytest.mark.parametrize("pattern", [f'"{_COUNTED_CHAR}{{0,}}"', "a|b{5}", "(?i)x{5}", "a{2}",
                                     "[a{5}]", r"\{5}x{2}", "(?:a){5,2}"])
def test_split_refuses_what_it_cannot_split_safely(pattern):
    assert split_counted(pattern) is None


def test_long_counted_string_is_built_without_expanding_through_interegular():
    dfa = regex_to_byte_dfa(f'"{_COUNTED_CHAR}{{0,2048}}"')
    text = b'"' + b"a" * 2048 + b'"'
    state = 0
    for byte in text:
        state = int(dfa.table[state, byte])
        assert state != DEAD
    assert dfa.accepting[state]
    state = 0
    for byte in b'"' + b"a" * 2049:
        state = int(dfa.table[state, byte]) if state != DEAD else DEAD
    assert state == DEAD  # the 2049th character is refused
