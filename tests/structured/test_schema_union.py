"""Unions of plain object schemas (one determinised grammar, ``schema_union.py``) accept
exactly the objects one branch generates: random branches, random objects, checked
against ``jsonschema`` and the generation restrictions (listed names, written order).

Never looser. Stricter only where one name takes overlapping value schemas in two
branches (``{"const": 1}`` and ``{"type": "integer"}``): the lexer reads ``1`` as one
terminal, which commits to one branch (docs/structured.md, branch commitment)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

NAMES = ["a", "b", "c", "d"]
VALUE_SCHEMAS = [{"type": "integer"}, {"type": "string"}, {"const": 1}, {"type": "boolean"}]
VALUES = [0, 1, 2, "x", "", True, False]


@st.composite
def branch(draw) -> dict:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    properties = {n: draw(st.sampled_from(VALUE_SCHEMAS)) for n in names}
    required = [n for n in names if draw(st.booleans())]
    return {"type": "object", "properties": properties, "required": required}


objects = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES)),
                   max_size=4, unique_by=lambda m: m[0])


def generated_by(schema: dict, members: list[tuple[str, object]]) -> bool:
    """Valid for ``schema`` and written as the engine writes it: listed names only, in
    the order the schema lists them."""
    order = list(schema["properties"])
    names = [n for n, _ in members]
    if any(n not in order for n in names) or names != sorted(names, key=order.index):
        return False
    return Draft202012Validator(schema).is_valid(dict(members))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(branches=st.lists(branch(), min_size=2, max_size=3),
       samples=st.lists(objects, min_size=8, max_size=8))
def test_plain_object_union_accepts_exactly_what_a_branch_generates(
        compile_for, accepts, branches, samples):
    schema = {"anyOf": branches}
    compiled = compile_for(json_schema=schema)
    # also every object one branch generates, so acceptance is tested, not only refusal
    samples = [*samples, *([(n, 1 if "integer" in json.dumps(s) or "const" in s else
                            "x" if "string" in json.dumps(s) else True)
                           for n, s in b["properties"].items()] for b in branches)]
    exact = not _overlapping_values(branches)
    for members in samples:
        text = json.dumps(dict(members), separators=(",", ":"))
        expected = any(generated_by(b, members) for b in branches)
        accepted = accepts(compiled, text)
        assert accepted == expected if exact else not accepted or expected, (schema, text)
        if accepted:
            assert Draft202012Validator(schema).is_valid(dict(members))


def _overlapping_values(branches: list[dict]) -> bool:
    """Whether a name takes both {"const": 1} and {"type": "integer"} (the only pair of
    :data:`VALUE_SCHEMAS` whose values overlap)."""
    for name in NAMES:
        kinds = {json.dumps(b["properties"][name]) for b in branches if name in b["properties"]}
        if {json.dumps({"const": 1}), json.dumps({"type": "integer"})} <= kinds:
            return True
    return False
