"""A union (``anyOf``, exclusive ``oneOf``) of plain object schemas as one object grammar.

Two object alternatives that accept one object alike make the union's grammar
ambiguous: ``{"name": "x"}`` when both list ``name`` first and the members after it are
optional (pydantic's ``Union[A, B]`` of two such models). An LALR parser cannot choose
the branch to reduce, so such a union could not compile. A *plain* object schema (only
``type: object``, ``properties``, ``required`` and no other names; members in the order
written) accepts sequences of members, each a letter (name, value rule). Here the
branches' sequences are determinised into one grammar: a state is the set of (branch,
last member written) pairs that the members so far fit, so every object has one
derivation. Letters with one name and different value rules stay apart (the values
then tell the branches apart, or the parser reports the overlap as before).
"""

from __future__ import annotations

import re
from typing import Any

from specdec.structured.schema_object import Member, _spelling

MAX_STATES = 256  # more: the branches stay separate alternatives
PLAIN_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties"})
State = frozenset[tuple[int, int]]  # (branch, index of the last member written; -1: none)


def is_plain(compiler: Any, node: Any) -> bool:
    """Whether ``node`` is a plain object schema as the compiler generates it: objects
    with listed names only (its ``properties``), in the order written."""
    if not isinstance(node, dict) or compiler.property_order != "written":
        return False
    if any(compiler.is_keyword(k) and k not in PLAIN_KEYWORDS for k in node):
        return False
    if node.get("type") not in ("object", ["object"]):
        return False
    properties, required = node.get("properties"), node.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list) \
            or not set(required) <= set(properties):
        return False
    default_extra = compiler.additional_properties == "open"  # listed, closed: none
    return node.get("additionalProperties", default_extra) is False


def plain_members(compiler: Any, node: Any, where: str) -> list[Member] | None:
    """The members of ``node`` if it is a plain object schema (:func:`is_plain`), else
    None."""
    if not is_plain(compiler, node):
        return None
    properties, required = node["properties"], node.get("required", [])
    members = []
    for name, schema in properties.items():
        value = compiler.value(schema, f"{where}/properties/{name}")
        if value is None:
            if name in required:
                return None  # accepts no object: the ordinary path says so
            continue
        members.append(Member(name, compiler.terminal(re.escape(_spelling(name))), value,
                              name in required))
    return members


def union_of_objects(compiler: Any, branches: list[list[Member]]) -> str | None:
    """One rule for the objects any of ``branches`` accepts, or None when the
    determinised member automaton would exceed :data:`MAX_STATES`."""
    builder = _Builder(compiler, branches)
    start: State = frozenset((b, -1) for b in range(len(branches)))
    try:
        body = builder.members(start, first=True)
    except _TooManyStates:
        return None
    alternatives = ["LBRACE RBRACE"] if builder.accepting(start) else []
    if body is not None:
        alternatives.append(f"LBRACE {body} RBRACE")
    return compiler.rule(alternatives) if alternatives else None


class _TooManyStates(Exception):
    pass


class _Builder:
    def __init__(self, compiler: Any, branches: list[list[Member]]):
        self.c = compiler
        self.branches = branches
        self.memo: dict[tuple[State, bool], str | None] = {}

    def accepting(self, state: State) -> bool:
        """Whether the object may close here: some branch has no required member left."""
        return any(not any(m.required for m in self.branches[b][p + 1:]) for b, p in state)

    def moves(self, state: State) -> dict[tuple[str, str], State]:
        """(key terminal, value rule) -> the state after that member."""
        out: dict[tuple[str, str], set[tuple[int, int]]] = {}
        for b, p in sorted(state):
            for j, m in enumerate(self.branches[b][p + 1:], start=p + 1):
                out.setdefault((m.key, m.value), set()).add((b, j))
                if m.required:
                    break  # a required member cannot be skipped
        return {letter: frozenset(after) for letter, after in out.items()}

    def members(self, state: State, first: bool) -> str | None:
        """The rule of the non-empty member lists from ``state`` on (None: there are
        none); ``first``: nothing written before (no comma)."""
        key = (state, first)
        if key not in self.memo:
            if len(self.memo) >= 2 * MAX_STATES:
                raise _TooManyStates
            sep = "" if first else "COMMA "
            options = []
            for (name, value), after in self.moves(state).items():
                tail = self.members(after, first=False)
                rest = "" if tail is None else f" [{tail}]" if self.accepting(after) \
                    else f" {tail}"
                options.append(f"{sep}{name} COLON {value}{rest}")
            self.memo[key] = self.c.rule(options) if options else None
        return self.memo[key]
