"""Validation keywords enforced by rewriting (``not``, ``if``/``then``/``else``,
``contains``, merged ``allOf`` bounds...): valid texts accepted, invalid ones rejected
by the compiled matcher, and what stays refused is refused by name."""

from __future__ import annotations

import json

import pytest

from specdec.structured.errors import UnsupportedSchemaError
from specdec.structured.json_schema import schema_to_lark

CASES = [
    # schema, accepted texts, rejected texts
    ({"not": {"type": "integer"}}, ["1.5", '"a"', "null", "[]", "{}", "true"],
     ["1", "-3", "0"]),
    ({"not": {"type": ["integer", "boolean"]}}, ["1.5", '"x"'], ["true", "1"]),
    ({"not": {"const": 5}}, ["4", "6", "5.5", '"5"', "[5]"], ["5", "5.0"]),
    ({"type": "string", "not": {"enum": ["a", "b"]}}, ['"c"', '"ab"', '""'],
     ['"a"', '"b"', "1"]),
    ({"type": "integer", "not": {"minimum": 3}}, ["2", "-5"], ["3", "10", "1.5"]),
    ({"type": "string", "not": {"maxLength": 2}}, ['"abc"'], ['"ab"', '""']),
    ({"not": {"type": "object", "properties": {"foo": {"type": "string"}}}},
     ['{"foo":1}', "1", '"x"'], ['{"foo":"x"}', "{}"]),
    ({"properties": {"foo": {"not": {}}, "bar": {}}}, ['{"bar":1}', "{}"], ['{"foo":1}']),
    ({"not": {"not": {"type": "string"}}}, ['"x"'], ["1", "null"]),
    ({"if": {"exclusiveMaximum": 0}, "then": {"minimum": -10}, "else": {"maximum": 100}},
     ["-5", "50", "0", '"x"'], ["-11", "101"]),
    ({"if": {"const": 1}, "then": False}, ["2", '"a"'], ["1"]),
    ({"if": {"type": "string"}, "else": {"type": "integer"}}, ['"a"', "3"], ["1.5", "null"]),
    ({"if": {"const": 0}}, ["0", '"x"'], []),  # if alone constrains nothing
    ({"contains": {"const": 1}, "minContains": 2, "maxContains": 3},
     ["[1,1]", "[1,2,1,1]", '["x",1,1]', "{}"], ["[1]", "[1,1,1,1]", "[2,3]", "[]"]),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}},
     ["[1,5]", "[7]"], ["[1,2]", '[5,"a"]', "[]"]),
    ({"contains": {"type": "null"}, "minContains": 0, "maxContains": 0},
     ["[]", "[1,2]"], ["[null]", "[1,null]"]),
    ({"type": "integer", "allOf": [{"minimum": 2}, {"minimum": 5, "maximum": 9}]},
     ["5", "9"], ["3", "10"]),
    ({"allOf": [{"properties": {"a": {"type": "integer"}}},
                {"properties": {"b": {"type": "string"}, "a": {"minimum": 0}}}]},
     ['{"a":1,"b":"x"}', '{"b":"y"}'], ['{"a":-1}', '{"b":2}']),
    ({"type": "integer", "enum": [1, 5, 9], "minimum": 4}, ["5", "9"], ["1", "4"]),
    ({"type": "integer", "multipleOf": 3}, ["0", "3", "-9", "123", "1000002"],
     ["1", "-4", "10", "1000001"]),
    ({"type": "integer", "multipleOf": 4, "exclusiveMinimum": 0}, ["4", "100"],
     ["0", "-4", "6"]),
    ({"type": "number", "multipleOf": 0.01}, ["1.25", "3", "0.1", "1.500", "-2.5"],
     ["1.251", "0.001"]),
    # a fractional multipleOf: at most its fraction digits, their integer a multiple
    ({"multipleOf": 1.5}, ["3", "-6", '"x"', "4.5", "-4.5", "1.50", "0", "10.5"],
     ["1", "4.6", "0.75", "1.05", "01.5", "1."]),
    ({"type": "number", "multipleOf": 0.15}, ["0.3", "0.45", "1.5", "-3", "0.150"],
     ["0.1", "0.2", "1", "0.151"]),
    ({"type": "number", "multipleOf": 2.56}, ["0", "-256", "64"],  # past MAX_DECIMAL_STATES:
     ["2.5", "1.28", "2.56001"]),  # integer multiples (5.12 is valid but not generated)
    ({"enum": [2, 3, 4.5], "multipleOf": 1.5}, ["3", "4.5"], ["2"]),
    # fractional bounds on numbers: exact, compared digit by digit
    ({"type": "number", "minimum": 1.1, "exclusiveMaximum": 3.5},
     ["2", "2.5", "3", "3.0", "1.1", "1.10", "1.5", "3.49999"],
     ["1", "1.05", "1.0999", "3.6", "3.5", "3.50", "4"]),
    ({"exclusiveMinimum": 1.1}, ["1.2", "1.1000001", "5"], ["1.1", "1.10", "1", "-3"]),
    ({"type": "number", "minimum": -1.5, "maximum": -1.25},
     ["-1.5", "-1.25", "-1.3", "-1.250"], ["-1.51", "-1.2", "-1", "1.3", "-2"]),
    ({"type": "integer", "multipleOf": 2, "not": {"multipleOf": 3}}, ["2", "-4", "8", "10"],
     ["0", "6", "-12", "3", "1"]),
    ({"not": {"multipleOf": 2}}, ["1", "-3", "13"], ["0", "2", "-4", '"x"', "null"]),
    ({"items": {"multipleOf": 2}, "contains": {"multipleOf": 3}}, ["[2,6]", "[6]", "[0]"],
     ["[2,4]", "[3]", "[]"]),
    ({"type": "integer", "allOf": [{"multipleOf": 2}, {"multipleOf": 3}]}, ["0", "12", "-6"],
     ["2", "3", "4", "9"]),
    ({"properties": {"foo": {"type": "string"}}, "unevaluatedProperties": False},
     ['{"foo":"x"}', "{}", "1"], ['{"foo":"x","bar":1}', '{"bar":1}']),
    ({"properties": {"foo": {"type": "string"}}, "allOf": [{"properties": {"bar": {}}}],
      "unevaluatedProperties": {"type": "integer"}},
     ['{"foo":"x","bar":[1],"baz":2}', '{"baz":3}'], ['{"foo":"x","baz":"y"}']),
    ({"$defs": {"b": {"properties": {"bar": {"type": "string"}}}}, "$ref": "#/$defs/b",
      "properties": {"foo": {"type": "string"}}, "unevaluatedProperties": False},
     ['{"foo":"x","bar":"y"}'], ['{"foo":"x","bar":"y","baz":1}']),
    ({"prefixItems": [{"type": "string"}], "allOf": [{"prefixItems": [True, {"type": "number"}]}],
      "unevaluatedItems": False}, ['["a",1]', '["a"]', "[]"], ['["a",1,2]', '[1]', '["a","b"]']),
    ({"items": {"type": "string"}, "unevaluatedItems": False}, ['["a","b"]'], ["[1]"]),
    ({"allOf": [{"properties": {"a": {"type": "integer"}}},
                {"additionalProperties": {"minimum": 0}}]},
     ['{"a":1}', "{}"], ['{"a":-1}', '{"a":"x"}']),
    ({"propertyNames": {"maxLength": 3}}, ['{"abc":1,"x":[]}', "{}", "1"], ['{"abcd":1}']),
    ({"propertyNames": {"pattern": "^a+$"}}, ['{"aa":1}'], ['{"ab":1}', '{"":1}']),
    ({"propertyNames": {"enum": ["foo", "bar"]}}, ['{"foo":1,"bar":2}', "{}"],
     ['{"baz":1}']),
    ({"propertyNames": False}, ["{}", "[]"], ['{"a":1}']),
    ({"properties": {"ab": {}, "abcd": {}}, "propertyNames": {"maxLength": 3}},
     ['{"ab":1}'], ['{"abcd":1}']),
    ({"minProperties": 2}, ['{"a":1,"b":2}', '{"a":1,"b":2,"c":3}', "[]"],
     ["{}", '{"a":1}']),
    ({"maxProperties": 2}, ["{}", '{"a":1,"b":2}'], ['{"a":1,"b":2,"c":3}']),
    ({"properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 1, "maxProperties": 2},
     ['{"a":1}', '{"b":1,"c":2}'], ["{}", '{"a":1,"b":2,"c":3}']),
    ({"dependentRequired": {"bar": ["foo"]}}, ['{"foo":1,"bar":2}', '{"foo":1}', '{"x":1}'],
     ['{"bar":2}', '{"bar":2,"x":1}']),
    ({"properties": {"a": {}, "b": {}}, "dependentRequired": {"b": ["a"]}},
     ['{"a":1,"b":2}', '{"a":1}', "{}"], ['{"b":2}']),
    ({"required": ["foo"]}, ['{"foo":1}', '{"foo":1,"x":2}'], ["{}", '{"x":2}']),
    ({"allOf": [{"properties": {"a": {}}, "additionalProperties": False},
                {"properties": {"b": {}}}]}, ['{"a":1}', "{}"], ['{"b":1}', '{"a":1,"b":2}']),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, ["1", "-3", "2.5", '"x"'],
     ["3", "2", "1.5"]),
    ({"type": "string", "oneOf": [{"minLength": 2}, {"maxLength": 4}]}, ['"a"', '"abcde"'],
     ['"ab"', '"abcd"', "1"]),
    ({"type": "object", "oneOf": [{"required": ["foo", "bar"]}, {"required": ["foo", "baz"]}]},
     ['{"foo":1,"bar":2}', '{"foo":1,"baz":2}'], ['{"foo":1,"bar":2,"baz":3}', '{"foo":1}']),
    ({"type": "object", "not": {"required": ["a"]}}, ["{}", '{"b":1}'], ['{"a":1}']),
    ({"anyOf": [{"type": "number"}, {}]}, ["1", '"x"', "null"], []),
    ({"anyOf": [{"properties": {"bar": {"type": "integer"}}, "required": ["bar"]},
                {"properties": {"foo": {"type": "string"}}, "required": ["foo"]}]},
     ['{"bar":2}', '{"foo":"x"}', "null", "3"], ['{"bar":"x"}', '{"foo":1}', "{}"]),
    ({"$defs": {"s": {"$dynamicAnchor": "s", "type": "string"}},
      "items": {"$dynamicRef": "#s"}}, ['["a"]', "[]"], ["[1]"]),
    ({"$id": "urn:uuid:deadbeef-1234-ffff-ffff-4321feebdaed",
      "$defs": {"bar": {"type": "string"}}, "properties": {"foo": {"$ref": "#/$defs/bar"}}},
     ['{"foo":"x"}'], ['{"foo":1}']),
    ({"patternProperties": {"f.*o": {"type": "integer"}}},
     ['{"foo":1,"fooooo":2}', "{}", '{"xfoy":3}'], ['{"foo":"bar"}', '{"fooooo":"x"}']),
    ({"properties": {"foo": {}, "bar": {}}, "patternProperties": {"^v": {}},
      "additionalProperties": False},
     ['{"foo":1,"vroom":2}', '{"v":[]}'], ['{"foo":1,"quux":2}', '{"x":1}']),
    ({"dependentSchemas": {"bar": {"properties": {"foo": {"type": "integer"}}}}},
     ['{"foo":1,"bar":2}', '{"bar":2}', "1"], ['{"foo":"x","bar":2}']),
    ({"type": "object", "allOf": [{"not": {"required": ["a"]}}, {"not": {"required": ["b"]}}]},
     ["{}", '{"c":1}'], ['{"a":1}', '{"b":1}']),
    # patternProperties beside additional properties: those are the names no pattern
    # matches; a listed name a pattern matches takes both schemas
    ({"patternProperties": {"^a": {}}, "additionalProperties": {"type": "integer"}},
     ['{"ab":"x","b":1}', '{"a":[]}', "{}"], ['{"b":"x"}', '{"ba":"x"}']),
    ({"properties": {"foo": {"type": "array", "maxItems": 3}, "bar": {"type": "array"}},
      "patternProperties": {"f.o": {"minItems": 2}}, "additionalProperties": {"type": "integer"}},
     ['{"foo":[1,2]}', '{"bar":[],"fxo":[1,2]}', '{"quux":3}', '{"f/o":[1,2],"q":3}'],
     ['{"foo":[1]}', '{"foo":[1,2,3,4]}', '{"fxo":[1]}', '{"quux":"x"}', '{"f\\/o":[1]}',
      '{"foo":[1,2],"foo":[1,2]}']),
    ({"properties": {"a/b": {"type": "integer"}}, "patternProperties": {"^a": {"minimum": 2}},
      "additionalProperties": False}, ['{"a/b":2}', '{"ax":5}', '{"ax":"s"}'],
     ['{"a/b":1}', '{"a\\/b":1}', '{"a\\/b":2}', '{"ax":1}', '{"b":2}']),
    # integers are generated without a fraction by default (integer_fraction=False)
    ({"type": "integer"}, ["1", "-7", "10"], ["1.0", "1.5", "1.", "1e2", ".0"]),
    ({"not": {"type": "integer"}}, ["1.5"], ["1.0", "1"]),
    # const/enum objects match in any member order, still without duplicates
    ({"const": {"foo": "bar", "baz": [1, {"a": 1, "b": 2}]}},
     ['{"baz":[1,{"b":2,"a":1}],"foo":"bar"}', '{"foo":"bar","baz":[1,{"a":1,"b":2}]}'],
     ['{"foo":"bar"}', '{"foo":"bar","foo":"bar"}', '{"foo":"bar","baz":[1,{"a":1}]}']),
    # allOf of values compares them as JSON does: true is not 1, at any depth
    ({"allOf": [{"properties": {"a": {"const": True}}}, {"properties": {"a": {"const": 1}}}]},
     ["{}"], ['{"a":true}', '{"a":1}']),
    ({"allOf": [{"enum": [True, 2, [1], 3.0]}, {"enum": [1, 2, [True], 3]}]}, ["2", "3"],
     ["true", "1", "[1]", "[true]"]),
    ({"allOf": [{"const": 1.0}, {"const": 1}]}, ["1"], ["true", "2"]),
    ({"enum": ["ab", "cd", "a\nb", "xa"], "pattern": "^a"}, ['"ab"', '"a\\nb"'],
     ['"cd"', '"xa"']),
    # oneOf whose options no value satisfies together is their anyOf: types (through allOf
    # and anyOf), finite values, values failing the other's checks, a required
    # discriminator property
    ({"oneOf": [{"type": "null"}, {"allOf": [{"type": "object"}, {"required": ["a"]}]}]},
     ["null", '{"a":1}'], ["{}", "1"]),
    ({"oneOf": [{"enum": ["x", "y"]}, {"type": "string", "pattern": "^re:"}]},
     ['"x"', '"re:a"'], ['"z"', '"xre:"']),
    ({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                 "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"enum": ["b", "c"]}},
                 "required": ["kind", "y"]}]},
     ['{"kind":"a","x":1}', '{"kind":"b","y":2}'], ['{"kind":"a","x":"s"}', '{"kind":"b"}',
                                                     '{"kind":"d"}', '{"x":1}']),
    # closed objects each requiring a name the other never writes: no complement needed
    ({"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}, "c": {}},
                 "required": ["a"], "additionalProperties": False},
                {"type": "object", "properties": {"b": {"type": "integer"}, "c": {}},
                 "required": ["b"], "additionalProperties": False}]},
     ['{"a":1}', '{"b":1,"c":2}', '{"a":1,"c":null}'], ['{"c":1}', '{"a":1,"b":2}', "{}"]),
    # a discriminator not required in both: {} satisfies both, so it is no answer
    ({"type": "object", "oneOf": [{"properties": {"k": {"const": "a"}}, "required": ["k"]},
                                  {"properties": {"k": {"const": "b"}}}]},
     ['{"k":"a"}', '{"k":"b"}', "{}"], []),
]


# integer_fraction=True: 1.0 is the integer 1 (the specification counts values).
FRACTION_CASES = [
    ({"type": "integer"}, ["1", "1.0", "-0.00", "10.000"], ["1.5", "1.", "1e2", ".0"]),
    ({"type": "integer", "minimum": 3}, ["3.0", "4"], ["2.0", "3.5"]),
    ({"type": "integer", "multipleOf": 3}, ["3.0", "-9.00", "6"], ["4.0", "3.3"]),
]


@pytest.mark.parametrize(("schema", "good", "bad"), FRACTION_CASES,
                         ids=[json.dumps(c[0])[:60] for c in FRACTION_CASES])
def test_integers_with_a_zero_fraction(compile_for, accepts_exactly, schema, good, bad):
    from specdec.structured.json_schema import schema_to_lark

    grammar = schema_to_lark(schema, integer_fraction=True)
    accepts_exactly(compile_for(grammar=grammar), good, bad)


@pytest.mark.parametrize(("schema", "good", "bad"), CASES,
                         ids=[json.dumps(c[0])[:60] for c in CASES])
def test_keyword_accepts_exactly(compile_for, accepts_exactly, schema, good, bad):
    accepts_exactly(compile_for(json_schema=schema), good, bad)


# property_order="any" (with the specification's additional properties): listed members
# in any order, each at most once; required ones, dependencies and counts still exact.
ANY_ORDER_CASES = [
    ({"properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
      "additionalProperties": False},
     ['{"b":"x","a":1}', "{}", '{"a":1}'], ['{"b":"x","a":1,"b":"y"}', '{"c":1}', '{"b":1}']),
    ({"properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {}},
      "required": ["a", "b"], "minProperties": 4, "maxProperties": 5},
     ['{"b":"x","z":1,"a":1,"c":2}', '{"x":1,"y":2,"a":1,"b":""}',
      '{"c":1,"b":"","a":2,"x":1,"y":2}'],
     ['{"a":1,"b":"x"}', '{"a":1,"b":"x","c":1}', '{"a":1,"a":1,"b":"x","c":1}',
      '{"a":"x","b":"x","c":1,"d":1}', '{"c":1,"b":"","a":2,"x":1,"y":2,"z":3}',
      '{"a":1,"b":"x","c":1,"c":2}']),
    ({"dependentRequired": {"foo\nbar": ["foo\rbar"]}},
     ['{"foo\\nbar":1,"foo\\rbar":2}', '{"foo\\rbar":2,"foo\\nbar":1}', '{"a":1}',
      '{"a":1,"foo\\rbar":2,"b":1,"foo\\nbar":1,"c":3}'],
     ['{"foo\\nbar":1}', '{"a":1,"foo\\nbar":1,"b":2}',
      '{"foo\\rbar":2,"foo\\nbar":1,"foo\\rbar":2}']),
    ({"allOf": [{"properties": {"bar": {"type": "integer"}}, "required": ["bar"]},
                {"properties": {"foo": {"type": "string"}}, "required": ["foo"]}]},
     ['{"foo":"baz","bar":2}', '{"bar":2,"foo":"baz"}'], ['{"foo":"baz"}', '{"foo":1,"bar":2}']),
    ({"patternProperties": {"f.*o": {"type": "integer"}}},
     ['{"foo":1,"fooooo":2}', "{}", '{"xfoy":3}', '{"bar":"x","foo":1}'],
     ['{"foo":"bar"}', '{"fooooo":"x"}', '{"bar":1,"foo":"x"}']),
]


@pytest.mark.parametrize(("schema", "good", "bad"), ANY_ORDER_CASES,
                         ids=[json.dumps(c[0])[:60] for c in ANY_ORDER_CASES])
def test_any_property_order_accepts_exactly(compile_for, accepts_exactly, schema, good, bad):
    grammar = schema_to_lark(schema, additional_properties="open", property_order="any")
    accepts_exactly(compile_for(grammar=grammar), good, bad)


def test_written_property_order_is_the_default(compile_for, accepts_exactly):
    schema = {"properties": {"a": {}, "b": {}}}
    accepts_exactly(compile_for(json_schema=schema), ['{"a":1,"b":2}'], ['{"b":2,"a":1}'])


def test_union_of_objects_sharing_a_leading_property(compile_for, accepts_exactly):
    """Equal schemas at two places are one rule: two rules with one body made LALR fail
    (reduce/reduce) on a union whose branches start with the same property."""
    branch = {"type": "object", "properties": {"x": {"type": "integer"}, "kind": {}},
              "required": ["kind"]}
    schema = {"anyOf": [{**branch, "properties": {**branch["properties"], "kind": {"const": k}}}
                        for k in ("a", "b")]}
    accepts_exactly(compile_for(json_schema=schema), ['{"x":1,"kind":"a"}', '{"kind":"b"}'],
                    ['{"x":1,"kind":"c"}', '{"x":1}', '{"x":"1","kind":"a"}'])


@pytest.mark.parametrize(("schema", "keyword"), [
    ({"not": {"pattern": "^a"}}, "pattern"),
    ({"not": {"additionalProperties": False}}, "additionalProperties"),
    ({"not": {"enum": [[1]]}}, "array"),
    ({"contains": {"type": "null"}, "minItems": 2}, "contains"),
    ({"type": "integer", "multipleOf": 3, "minimum": 5}, "multipleOf"),
    ({"type": "integer", "multipleOf": 1000}, "multipleOf"),
    ({"not": {"multipleOf": 1.5}}, "multipleOf"),
    ({"anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}],
      "unevaluatedProperties": False}, "anyOf"),
    ({"prefixItems": [True], "contains": {"type": "string"}, "unevaluatedItems": False},
     "contains"),
    ({"properties": {"a": {}}, "additionalProperties": True,
      "propertyNames": {"maxLength": 3}}, "propertyNames"),
    ({"propertyNames": {"anyOf": [{"maxLength": 2}]}}, "propertyNames"),
    ({"minProperties": 65}, "minProperties"),
    ({"patternProperties": {"a*": {"type": "integer"}, "aaa*": {"maximum": 20}}},
     "patternProperties"),
    ({"$defs": {"a": {"$dynamicAnchor": "x", "type": "string"},
                "b": {"$id": "b", "$dynamicAnchor": "x"}}, "items": {"$dynamicRef": "#x"}},
     "dynamicAnchor"),
    ({"if": {"pattern": "^x"}, "then": {"maxLength": 3}}, "pattern"),
])
def test_inexpressible_combinations_are_refused_by_name(schema, keyword):
    with pytest.raises(UnsupportedSchemaError, match=keyword):
        schema_to_lark(schema)


NAMED = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _named_with(extra: str, **more) -> dict:
    return {**NAMED, "properties": {**NAMED["properties"], extra: {"type": "integer"}}, **more}


def test_union_of_plain_objects_is_one_object_grammar(compile_for, accepts_exactly):
    """Branches that both accept {"name": "x"} (optional members after a shared one):
    pydantic's Union[A, B]. Determinised into one grammar, each object derived once."""
    three = {"anyOf": [_named_with("age"), _named_with("email"),
                       {"type": "object", "properties": {"id": {"type": "integer"}},
                        "required": ["id"]}]}
    accepts_exactly(compile_for(json_schema=three),
                    ['{"name":"x"}', '{"name":"x","age":1}', '{"name":"x","email":2}',
                     '{"id":3}'],
                    ['{"name":"x","age":1,"email":2}', '{"age":1}', "{}", '{"name":1}',
                     '{"name":"x","id":3}', '{"id":3,"name":"x"}', '{"name":"x","age":"1"}'])
    # a member both list, with different values: the value tells the branches apart
    valued = {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"},
                                                          "b": {"type": "string"}},
                         "required": ["a"]},
                        {"type": "object", "properties": {"a": {"type": "string"},
                                                          "c": {"type": "integer"}},
                         "required": ["a"]}]}
    accepts_exactly(compile_for(json_schema=valued),
                    ['{"a":1}', '{"a":1,"b":"x"}', '{"a":"s","c":2}', '{"a":"s"}'],
                    ['{"a":1,"c":2}', '{"a":"s","b":"x"}', "{}", '{"b":"x"}'])


def test_union_the_parser_cannot_follow_is_refused_as_a_schema_problem(compile_for):
    """Object branches beyond the plain ones (here a maxProperties) that both accept
    {"name": "x"} make the grammar ambiguous: refused, naming the alternatives."""
    schema = {"anyOf": [_named_with("age", maxProperties=2), _named_with("email")]}
    with pytest.raises(UnsupportedSchemaError, match="alternatives") as info:
        compile_for(json_schema=schema)
    assert "Lark" not in str(info.value)


def test_oneof_evidence_ignores_siblings_a_draft7_ref_overrides(compile_for, accepts):
    """In draft 7 a $ref's siblings are ignored: their `required` and `const` are no
    evidence that the options exclude each other ({"k": "y"} matches both)."""
    schema = {"$schema": "http://json-schema.org/draft-07/schema#",
              "definitions": {"a": {"type": "object"}},
              "oneOf": [{"$ref": "#/definitions/a", "required": ["k"],
                         "properties": {"k": {"const": "x"}}},
                        {"type": "object", "properties": {"k": {"const": "y"}},
                         "required": ["k"]}]}
    try:
        compiled = compile_for(json_schema=schema)
    except UnsupportedSchemaError:
        return  # refusing is exact too
    assert not accepts(compiled, '{"k":"y"}')
    assert accepts(compiled, "{}")


def test_oneof_evidence_from_values_the_pattern_check_cannot_decide(compile_for, accepts):
    """"a\\u0001" matches ^a, though the grammar never writes a control character for a
    pattern: the enum is no proof that the options exclude each other."""
    schema = {"oneOf": [{"enum": ["a\u0001", "b"]}, {"type": "string", "pattern": "^a"}]}
    try:
        compiled = compile_for(json_schema=schema)
    except UnsupportedSchemaError:
        return  # refusing is exact too
    assert not accepts(compiled, '"a\\u0001"')
