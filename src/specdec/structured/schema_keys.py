"""Property-name regexes that leave some names out: the JSON spellings one regex matches
and none of several others do, as one regex (for ``patternProperties`` beside
additional properties: the additional ones are the names no pattern matches).

Each regex becomes an automaton (interegular, the parser behind the lexer's DFAs), the
difference is taken there, and the result is written back as a regex by state
elimination. Exact over the spellings themselves; callers pass a ``base`` without
escapes, where a spelling and its name are one and the same, so that leaving out the
spellings a pattern matches leaves out the names it matches.
"""

from __future__ import annotations

import interegular
from interegular.fsm import FSM, anything_else

from specdec.structured.errors import UnsupportedSchemaError
from specdec.structured.json_pattern import class_char

MAX_DIFFERENCE_REGEX = 20_000  # longer results are refused (state elimination can grow)


def regex_difference(base: str, removed: list[str], where: str) -> str | None:
    """A regex matching what ``base`` matches and no regex of ``removed`` does (None:
    nothing); refused where a regex cannot be parsed or the result grows too long."""
    fsm = _fsm(base, where)
    for regex in removed:
        fsm = fsm.difference(_fsm(regex, where))
    fsm = fsm.reduce()
    if fsm.empty():
        return None
    regex = _to_regex(fsm)
    if len(regex) > MAX_DIFFERENCE_REGEX:
        raise UnsupportedSchemaError(
            f"property names at {where}: the names no pattern matches need a regex of "
            f"more than {MAX_DIFFERENCE_REGEX} characters")
    return regex


def regex_intersection(a: str, b: str, where: str) -> str | None:
    """A regex matching what both ``a`` and ``b`` match (None: nothing)."""
    fsm = _fsm(a, where).intersection(_fsm(b, where)).reduce()
    return None if fsm.empty() else _to_regex(fsm)


def _fsm(regex: str, where: str) -> FSM:
    try:
        return interegular.parse_pattern(regex).to_fsm()
    except Exception as exc:  # noqa: BLE001 - interegular raises several types
        raise UnsupportedSchemaError(
            f"property names at {where}: cannot take the complement of {regex!r} ({exc})"
        ) from None


def _symbol_class(fsm: FSM, symbols: set[int]) -> str:
    """One character class for the alphabet ``symbols`` of ``fsm``."""
    chars = [c for c, s in fsm.alphabet._symbol_mapping.items() if s in symbols]
    if anything_else in chars:  # every character but those of the other symbols
        others = sorted(c for c, s in fsm.alphabet._symbol_mapping.items()
                        if s not in symbols and c is not anything_else)
        return f"[^{''.join(class_char(ord(c)) for c in others)}]" if others else "[\\s\\S]"
    return f"[{''.join(class_char(ord(c)) for c in sorted(chars))}]"


def _to_regex(fsm: FSM) -> str:
    """State elimination over the live states of ``fsm`` (a start and an end state
    added); edges hold regexes, ``""`` the empty word."""
    live = _live_states(fsm)
    start, end = "start", "end"
    edges: dict[object, dict[object, str]] = {start: {fsm.initial: ""}}
    for state in live:
        out = edges.setdefault(state, {})
        by_target: dict[object, set[int]] = {}
        for symbol, target in fsm.map.get(state, {}).items():
            if target in live:
                by_target.setdefault(target, set()).add(symbol)
        for target, symbols in by_target.items():
            out[target] = _symbol_class(fsm, symbols)
        if state in fsm.finals:
            out[end] = _union(out.get(end), "")
    while live:
        state = min(live, key=lambda s: _degree(edges, s))
        live.remove(state)
        loop = edges[state].pop(state, None)
        middle = "" if loop is None else f"(?:{loop})*"
        incoming = [(p, out.pop(state)) for p, out in edges.items() if state in out]
        for p, into in incoming:
            for q, away in edges[state].items():
                edges[p][q] = _union(edges[p].get(q), into + middle + _group(away))
        del edges[state]
    return edges[start].get(end, "")


def _live_states(fsm: FSM) -> set:
    """States reachable from the start that can still reach a final state."""
    reachable, stack = {fsm.initial}, [fsm.initial]
    while stack:
        for target in fsm.map.get(stack.pop(), {}).values():
            if target not in reachable:
                reachable.add(target)
                stack.append(target)
    alive = set(fsm.finals) & reachable
    changed = True
    while changed:
        changed = False
        for state in reachable - alive:
            if any(t in alive for t in fsm.map.get(state, {}).values()):
                alive.add(state)
                changed = True
    return alive


def _degree(edges: dict, state: object) -> int:
    incoming = sum(state in out for out in edges.values())
    return incoming * len(edges[state])


def _group(regex: str) -> str:
    return f"(?:{regex})" if "|" in regex else regex


def _union(a: str | None, b: str) -> str:
    if a is None or a == b:
        return b
    return f"(?:{a}|{b})"
