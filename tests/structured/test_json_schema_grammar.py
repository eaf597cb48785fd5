"""JSON schemas compiled to grammars: the defects the regex compiler had (each one
failed open or refused a valid document), pattern semantics, and refusals by name."""

from __future__ import annotations

import json

import pytest

from specdec.structured.errors import ConstraintError, UnsupportedSchemaError
from specdec.structured.json_pattern import pattern_to_json_regex
from specdec.structured.json_schema import schema_to_lark

CASES = [
    # schema, accepted texts, rejected texts
    ({"type": "object", "properties": {"foo": {}}, "required": ["foo"]},
     ['{"foo":1}', '{"foo":[1,{"a":null}]}', '{"foo":"x"}'],
     ["null", "12", '"x"', '{"foo":true', "{}"]),
    ({"allOf": [{}, {"type": "number"}]}, ["1", "1.5"], ['"foo"', "null"]),
    ({"type": "number"}, ["1.1", "1", "-0.5e3", "0"], ['"a"', "01", "1.", ".5", "+1"]),
    ({"type": "array", "items": False}, ["[]"], ["[1]"]),
    ({"prefixItems": [{"type": "integer"}], "items": False}, ["[]", "[1]", "{}", '"x"'],
     ["[1,2]", '["a"]']),
    ({"$defs": {"a": {"type": "array"}}, "$ref": "#/$defs/a", "maxItems": 2},
     ["[1,2]", "[]"], ["[1,2,3]", "{}"]),
    ({"maxItems": 2}, ["[1]", "{}", '"x"', "3", "null"], ["[1,2,3]"]),
    ({"format": "email"}, ['"a@b.example"', "1", "[]"], ['"not an email"']),
    (True, ["1", '{"a":[null]}'], []),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "id": "x", "readOnly": True,
      "examples": [1], "x-vendor": {"y": 1}, "title": "t"},
     ['{"a":1}', "{}"], ['{"a":"1"}']),
    ({"type": "integer", "minimum": -5, "exclusiveMaximum": 10}, ["-5", "9", "0"],
     ["-6", "10", "1.5"]),
    ({"type": "number", "minimum": 0, "exclusiveMaximum": 10},
     ["0", "-0", "0.5", "9.999", "3"], ["-0.1", "10", "10.0", "1e1", "-3"]),
    ({"type": "number", "exclusiveMinimum": -2, "maximum": -1},
     ["-1", "-1.5", "-1.99"], ["-2", "-2.0", "0", "-0.5"]),
    ({"enum": [1, "a", None, [1, 2]]}, ["1", "1.0", '"a"', "null", "[1,2]"], ["2", "true"]),
    ({"const": 0}, ["0", "0.0", "-0"], ["false", "1"]),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, ['"a"', "3"], ["null", "1.5"]),
    ({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "null"}]},
     ['"ab"', "null"], ['"abc"', "1"]),
    ({"type": "string", "minLength": 2}, ['"ab"', '"\\ud83d\\ude00x"'],
     ['"a"', '"\\ud83d\\ude00"']),  # a surrogate pair is one character
    ({"type": "object", "properties": {"n": {"type": "string"}},
      "additionalProperties": {"type": "integer"}},
     ['{"n":"x","k":1}', '{"k":1,"j":2}'], ['{"n":"x","k":"y"}', '{"n":"x","n":"y"}']),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "required": ["b"]},
     ['{"a":1,"b":2}', '{"b":2}'], ['{"a":1}', "{}", '{"b":2,"c":3}']),
]


@pytest.mark.parametrize(("schema", "good", "bad"), CASES,
                         ids=[json.dumps(c[0])[:60] for c in CASES])
def test_schema_accepts_exactly(compile_for, accepts_exactly, schema, good, bad):
    accepts_exactly(compile_for(json_schema=schema), good, bad)


def test_recursion_through_ref(compile_for, accepts):
    schema = {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}}, "required": ["v"]}},
        "$ref": "#/$defs/node"}
    compiled = compile_for(json_schema=schema)
    deep = {"v": 0}
    for i in range(1, 30):
        deep = {"v": i, "next": deep}
    assert accepts(compiled, json.dumps(deep, separators=(",", ":")))
    assert not accepts(compiled, '{"v":1,"next":{"next":{"v":2}}}')


@pytest.mark.parametrize(("pattern", "good", "bad"), [
    ("^\\t$", ['"\\t"'], ['"t"', '"\\\\t"']),  # matched against the decoded string
    ("^\\\\n$", ['"\\\\n"'], ['"\\n"']),  # a backslash and n, not a newline
    ("^\\d+$", ['"123"'], ['"١٢٣"', '""']),  # ECMA \d is ASCII digits
    ("a", ['"a"', '"xay"'], ['"xyz"']),  # unanchored: matches anywhere
    ("^[^a]*$", ['"bc"', '"\\""'], ['"bac"']),  # a quote may appear, escaped
    ("^.$", ['"x"', '"\\""'], ['"\\n"', '"xy"']),  # '.' excludes line terminators
])
def test_pattern_semantics(compile_for, accepts, pattern, good, bad):
    compiled = compile_for(json_schema={"type": "string", "pattern": pattern})
    for text in good:
        assert accepts(compiled, text), f"{pattern!r}: valid {text!r} rejected"
    for text in bad:
        assert not accepts(compiled, text), f"{pattern!r}: invalid {text!r} accepted"


@pytest.mark.parametrize("pattern", ["(?=a)", "(a)\\1", "\\bword", "a^b", "(?i)a"])
def test_irregular_patterns_are_refused(pattern):
    with pytest.raises(UnsupportedSchemaError):
        pattern_to_json_regex(pattern)


@pytest.mark.parametrize("keyword", ["recursiveRef"])
def test_unenforced_validation_keywords_are_refused_by_name(keyword):
    with pytest.raises(UnsupportedSchemaError, match=keyword):
        schema_to_lark({"type": "object", f"${keyword}": "#"})


def test_additional_properties_modes(compile_for, accepts):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    listed = compile_for(json_schema=schema)  # the generation default: listed only
    assert accepts(listed, '{"a":1}') and not accepts(listed, '{"a":1,"b":2}')
    from specdec.structured.compile import compile_spec
    from specdec.structured.spec import ConstraintSpec

    vocab = listed.vocab
    open_ = compile_spec(ConstraintSpec(
        "grammar", schema_to_lark(schema, additional_properties="open"), "t"), vocab)
    assert accepts(open_, '{"a":1,"b":[2]}') and not accepts(open_, '{"a":"x"}')
    strict = compile_spec(ConstraintSpec("grammar", schema_to_lark({"type": "object"},
                                                                   strict=True), "t"), vocab)
    assert accepts(strict, "{}") and not accepts(strict, '{"b":2}')


def test_false_schema_and_contradictions_accept_nothing():
    with pytest.raises(ConstraintError, match="no value"):
        schema_to_lark(False)
    with pytest.raises(ConstraintError, match="no value"):
        schema_to_lark({"allOf": [{"type": "string"}, {"type": "integer"}]})


def test_refs_resolve_against_the_base_uri_of_their_schema(compile_for, accepts):
    """$id changes the base for its subtree: "item.json" inside it names the sibling
    resource, not a file relative to the root."""
    schema = {
        "$id": "https://example.com/root.json",
        "$defs": {
            "a": {"$id": "https://example.com/nested/item.json", "type": "integer"},
            "b": {"$id": "https://example.com/item.json", "type": "string"},
            "c": {"$id": "https://example.com/nested/other.json", "$ref": "item.json"},
        },
        "$ref": "nested/other.json",
    }
    compiled = compile_for(json_schema=schema)
    assert accepts(compiled, "3") and not accepts(compiled, '"x"')


def test_remote_refs_come_only_from_retrieve():
    schema = {"$ref": "https://example.com/int.json"}
    with pytest.raises(UnsupportedSchemaError, match="nothing is fetched"):
        schema_to_lark(schema)
    docs = {"https://example.com/int.json": {"type": "integer", "$defs": {
        "s": {"$anchor": "str", "type": "string"}}}}
    assert "T" in schema_to_lark(schema, retrieve=docs.get)
    anchored = schema_to_lark({"$ref": "https://example.com/int.json#str"}, retrieve=docs.get)
    assert anchored != schema_to_lark(schema, retrieve=docs.get)
