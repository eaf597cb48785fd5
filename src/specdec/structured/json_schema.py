"""JSON schema -> regex, through outlines-core, with every keyword checked first.

outlines-core's ``build_regex_from_schema`` silently ignores keywords it does not
know (``minimum``, ``multipleOf``...). Structured output must fail closed, so the schema
is walked first: a keyword outside the table below raises
:class:`UnsupportedSchemaError` naming it and where it is. Integer bounds, which
outlines ignores, are compiled here into exact range regexes.

=========================  ===============================================================
Keyword                    Support
=========================  ===============================================================
type                       string, integer, number, boolean, null, object, array, lists
properties, required       yes; properties appear in schema order, optional ones may be
                           left out
additionalProperties       ``false`` (the default when ``properties`` is given: objects
                           are closed) or, without ``properties``, a schema for the values
enum, const                yes (any JSON values)
items, prefixItems         yes
minItems, maxItems         yes
minLength, maxLength       yes
pattern                    yes (anchors ``^``/``$`` allowed)
format                     date-time, date, time, uuid, email, uri
minimum, maximum,          integers: yes, exact; numbers: rejected (unsupported)
exclusiveMinimum/Maximum
anyOf, oneOf, allOf        yes (oneOf is treated as anyOf: exclusivity is not enforced)
$ref, $defs, definitions   yes, incl. recursion (unrolled to ``max_recursion_depth``)
title, description, ...    annotations are ignored (they do not constrain)
not, multipleOf, if/then,  rejected with UnsupportedSchemaError
uniqueItems, contains,
patternProperties, ...
=========================  ===============================================================

Strings follow outlines-core: any character except ``"``, ``\\``, controls and
U+007F..U+009F, and the escapes ``\\" \\\\ \\/ \\b \\f \\n \\r \\t`` (no ``\\uXXXX``).
"""

from __future__ import annotations

import json
from typing import Any

from specdec.structured.errors import ConstraintError, UnsupportedSchemaError
from specdec.structured.int_range import int_range_regex

COMPACT_WHITESPACE = r"[ ]?"  # outlines-core's default: at most one space between tokens
FLEXIBLE_WHITESPACE = r"[ \n]{0,4}"  # lets models that like newlines use them, bounded

ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$comment",
    "deprecated", "readOnly", "writeOnly", "$anchor",
})
SUPPORTED = frozenset({
    "type", "properties", "required", "additionalProperties", "enum", "const", "items",
    "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
    "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum",
})
FORMATS = frozenset({"date-time", "date", "time", "uuid", "email", "uri"})
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_PLACEHOLDER = "SPECDECRANGE{}X"


def schema_to_dict(schema: Any) -> dict:
    """Accept a dict, a JSON string or a pydantic model class (or instance)."""
    if isinstance(schema, dict):
        return schema
    if isinstance(schema, (str, bytes)):
        try:
            value = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise ConstraintError(f"json_schema is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ConstraintError("json_schema must be a JSON object")
        return value
    model_json_schema = getattr(schema, "model_json_schema", None)
    if callable(model_json_schema):
        return model_json_schema()
    raise ConstraintError(
        "json_schema must be a dict, a JSON string or a pydantic model, "
        f"got {type(schema).__name__}"
    )


def schema_to_regex(schema: Any, whitespace_pattern: str | None = None,
                    max_recursion_depth: int = 3) -> str:
    """The regex of the JSON documents ``schema`` accepts (checked against the table above)."""
    from outlines_core.json_schema import build_regex_from_schema

    schema = schema_to_dict(schema)
    ranges: list[str] = []
    rewritten = _check_and_rewrite(schema, "#", ranges)
    try:
        regex = build_regex_from_schema(
            json.dumps(rewritten), whitespace_pattern or COMPACT_WHITESPACE,
            max_recursion_depth=max_recursion_depth,
        )
    except Exception as exc:  # noqa: BLE001 - outlines raises plain exceptions
        raise ConstraintError(f"cannot compile json_schema: {exc}") from None
    for i, range_regex in enumerate(ranges):
        regex = regex.replace(f'"{_PLACEHOLDER.format(i)}"', range_regex)
    return regex


def _check_and_rewrite(node: Any, where: str, ranges: list[str]) -> Any:
    if isinstance(node, bool):
        return node
    if not isinstance(node, dict):
        raise ConstraintError(f"schema at {where} must be an object, got {node!r}")
    for key in node:
        if key not in SUPPORTED and key not in ANNOTATIONS:
            raise UnsupportedSchemaError(
                f"unsupported JSON schema keyword {key!r} at {where}; supported: "
                + ", ".join(sorted(SUPPORTED))
            )
    out = {k: v for k, v in node.items() if k not in ANNOTATIONS or k == "$id"}
    fmt = node.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise UnsupportedSchemaError(f"unsupported string format {fmt!r} at {where}; "
                                     f"supported: {', '.join(sorted(FORMATS))}")
    if "properties" in node and node.get("additionalProperties", False) is not False:
        raise UnsupportedSchemaError(
            f"'additionalProperties' other than false together with 'properties' at {where}"
        )
    bounds = [k for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
              if k in node]
    if bounds:
        if node.get("type") != "integer":
            raise UnsupportedSchemaError(
                f"numeric bounds {bounds} at {where} are supported for type 'integer' only"
            )
        ranges.append(int_range_regex(*_integer_bounds(node, where)))
        return {"const": _PLACEHOLDER.format(len(ranges) - 1)}
    for key in _SUBSCHEMA_LISTS:
        if key in node:
            out[key] = [_check_and_rewrite(s, f"{where}/{key}/{i}", ranges)
                        for i, s in enumerate(node[key])]
    for key in _SUBSCHEMA_MAPS:
        if key in node:
            out[key] = {name: _check_and_rewrite(s, f"{where}/{key}/{name}", ranges)
                        for name, s in node[key].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            out[key] = _check_and_rewrite(node[key], f"{where}/{key}", ranges)
    return out


def _integer_bounds(node: dict, where: str) -> tuple[int | None, int | None]:
    import math

    def as_int(key: str, value: Any, round_up: bool) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConstraintError(f"{key} at {where} must be a number, got {value!r}")
        return math.ceil(value) if round_up else math.floor(value)

    lo = hi = None
    if "minimum" in node:
        lo = as_int("minimum", node["minimum"], True)
    if "exclusiveMinimum" in node:
        v = as_int("exclusiveMinimum", node["exclusiveMinimum"], False) + 1
        lo = v if lo is None else max(lo, v)
    if "maximum" in node:
        hi = as_int("maximum", node["maximum"], False)
    if "exclusiveMaximum" in node:
        v = as_int("exclusiveMaximum", node["exclusiveMaximum"], True) - 1
        hi = v if hi is None else min(hi, v)
    if lo is not None and hi is not None and lo > hi:
        raise ConstraintError(f"integer bounds at {where} leave no value ({lo} > {hi})")
    return lo, hi
