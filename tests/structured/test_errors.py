"""Fail closed: every bad constraint is a clear ConstraintError (a ValueError)."""

from __future__ import annotations

import pytest

from specdec.structured import ConstraintError, UnsupportedSchemaError


@pytest.mark.parametrize("constraint, message", [
    (dict(grammar="start: foo"), "invalid Lark grammar"),
    (dict(grammar="no_such_grammar.lark"), "neither a file in grammars/"),
    (dict(grammar='start: S\nS: /(?<=a)b/\n'), "terminal S"),
    (dict(grammar='start: ESCAPED_STRING\n%import common.ESCAPED_STRING\n'),
     "ESCAPED_STRING"),
    (dict(regex="(unclosed"), "invalid regex"),
    (dict(regex=""), "non-empty"),
    (dict(choice=[]), "non-empty list"),
    (dict(choice="abc"), "non-empty list"),
    (dict(json_schema="{not json"), "not valid JSON"),
    (dict(), "exactly one"),
    (dict(regex="a", choice=["a"]), "exactly one"),
])
def test_bad_constraints_raise(compile_for, constraint, message):
    with pytest.raises(ConstraintError, match=message):
        compile_for(**constraint)


@pytest.mark.parametrize("schema, keyword", [  # the rest is enforced now (test_json_schema_*)
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "string", "format": "ipv4", "maxLength": 9}, "together"),
    ({"$ref": "https://example.com/schema.json"}, "nothing is fetched"),
    ({"type": "string", "pattern": "^(?=a)"}, "lookaround"),
])
def test_unsupported_schema_keywords_are_named(compile_for, schema, keyword):
    with pytest.raises(UnsupportedSchemaError, match=keyword):
        compile_for(json_schema=schema)


def test_errors_are_value_errors():
    assert issubclass(ConstraintError, ValueError)


def test_the_compilers_internal_keywords_are_refused_in_client_schemas():
    from specdec.structured.json_schema import schema_to_lark

    with pytest.raises(UnsupportedSchemaError, match="x-specdec-not-in.*reserved"):
        schema_to_lark({"type": "object", "properties": {
            "a": {"type": "string", "x-specdec-not-in": ["b"]}}})
    schema_to_lark({"type": "string", "x-vendor": 1})  # other x-* keywords are ignored
