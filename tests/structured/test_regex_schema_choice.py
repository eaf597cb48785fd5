"""Regex, JSON schema and choice constraints (outlines-core) on the real tokenizer."""

from __future__ import annotations

import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

PHONE = r"\(\d{3}\) \d{3}-\d{4}"  # outlines-core: \d is ASCII
TRICKY = r'Café "olé" \\ [ü]{1,3} [0-9]+'


def test_regex_with_spaces_quotes_escapes_and_non_ascii(compile_for, accepts):
    compiled = compile_for(regex=TRICKY)
    assert accepts(compiled, 'Café "olé" \\ üü 42')
    assert not accepts(compiled, 'Cafe "olé" \\ ü 42')
    assert not accepts(compiled, 'Café "olé" \\ üüüü 42')


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.from_regex(TRICKY, fullmatch=True))
def test_random_matches_are_accepted_token_by_token(compile_for, accepts, text):
    compiled = compile_for(regex=TRICKY)
    assert accepts(compiled, text)
    assert not accepts(compiled, text + "x")
    assert not accepts(compiled, text[:-1] + "é")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.from_regex(PHONE.replace(r"\d", "[0-9]"), fullmatch=True))
def test_phone_numbers(compile_for, accepts, text):
    assert accepts(compile_for(regex=PHONE), text)


def test_only_matching_text_can_be_generated(compile_for, tokenizer):
    """Walk the masks greedily with random choices: everything produced matches."""
    import random

    compiled = compile_for(regex=TRICKY)
    rng = random.Random(0)
    for _ in range(20):
        matcher = compiled.matcher()
        out: list[int] = []
        while not matcher.is_terminated():
            allowed = matcher.allowed_token_ids()
            tok = rng.choice(allowed)
            if tok == 2:
                break
            assert matcher.accept_token(tok)
            out.append(tok)
        assert re.fullmatch(TRICKY, tokenizer.decode(out))


class Address(BaseModel):
    city: str
    zip_code: str


class Person(BaseModel):
    name: str
    age: int
    address: Address
    tags: list[str] = []


def test_pydantic_schema(compile_for, accepts):
    compiled = compile_for(json_schema=Person)
    doc = Person(name="Zoë", age=3, address=Address(city="Oslo", zip_code="0150"), tags=["a"])
    assert accepts(compiled, doc.model_dump_json())
    assert not accepts(compiled, json.dumps({"name": "x"}))


def test_integer_bounds_are_exact(compile_for, accepts):
    compiled = compile_for(json_schema={"type": "integer", "minimum": -5, "maximum": 120})
    for n in (-5, 0, 7, 10, 99, 100, 120):
        assert accepts(compiled, str(n))
    for n in (-6, 121, 1000, -50):
        assert not accepts(compiled, str(n))


def test_schema_as_json_string_and_whitespace_policy(compile_for, accepts):
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}},
                         "required": ["a"]})
    assert accepts(compile_for(json_schema=schema), '{"a": 1}')
    assert not accepts(compile_for(json_schema=schema), '{\n"a": 1}')
    flexible = compile_for(json_schema=schema, whitespace_pattern=r"[ \n]{0,4}")
    assert accepts(flexible, '{\n  "a": 1\n}')


def test_recursive_schema(compile_for, accepts):
    schema = {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
        "required": ["v", "next"]}}, "$ref": "#/$defs/node"}
    compiled = compile_for(json_schema=schema)
    assert accepts(compiled, '{"v": 1, "next": {"v": 2, "next": null}}')


def test_choice(compile_for, accepts):
    choices = ["positive", "negative", "neutral", "a.b (c)", "pos"]
    compiled = compile_for(choice=choices)
    for c in choices:
        assert accepts(compiled, c)
    assert not accepts(compiled, "positiv")
    assert not accepts(compiled, "positive ")
    assert not accepts(compiled, "axb (c)")
