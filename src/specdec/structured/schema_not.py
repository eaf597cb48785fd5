"""``not`` and ``if``/``then``/``else`` rewritten into schemas the compiler enforces.

``negate(schema)`` is a schema accepting exactly the values ``schema`` rejects, for the
subschemas whose complement is expressible: ``type``, ``const``/``enum`` of scalars,
bounds, string and array length bounds, a whole ``multipleOf``, ``properties``,
``required``, ``not`` and ``anyOf`` alone (none of its alternatives). A conjunction of keywords
fails when one of them does, so the complement is the union of: the values of the
other types, the values outside ``const``/``enum``, and per keyword the values of its
type that violate it. Anything else is refused by name.

Internal keywords carry what plain keywords cannot say: :data:`NON_INTEGER` (numbers
with a non-zero fraction), :data:`NOT_IN` (strings other than these) and
:data:`NOT_MULTIPLE` (integers off the multiples of k).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from specdec.structured.errors import UnsupportedSchemaError

NON_INTEGER = "x-specdec-non-integer"  # true: numbers with a non-zero fraction only
NOT_IN = "x-specdec-not-in"  # [strings]: strings other than these
NOT_MULTIPLE = "x-specdec-not-multiple-of"  # k: integers that are not multiples of k
INTERNAL = frozenset({NON_INTEGER, NOT_IN, NOT_MULTIPLE})
CONDITIONAL = ("if", "then", "else")
SCALAR_TYPES = ("null", "boolean", "string", "array", "object")
# keyword -> (the type it constrains, the keyword and value of its violation)
_VIOLATIONS: dict[str, tuple[str, Callable[[Any], tuple[str, Any] | None]]] = {
    "minimum": ("number", lambda v: ("exclusiveMaximum", v)),
    "exclusiveMinimum": ("number", lambda v: ("maximum", v)),
    "maximum": ("number", lambda v: ("exclusiveMinimum", v)),
    "exclusiveMaximum": ("number", lambda v: ("minimum", v)),
    "minLength": ("string", lambda n: ("maxLength", n - 1) if n > 0 else None),
    "maxLength": ("string", lambda n: ("minLength", n + 1)),
    "minItems": ("array", lambda n: ("maxItems", n - 1) if n > 0 else None),
    "maxItems": ("array", lambda n: ("minItems", n + 1)),
}
NEGATABLE = frozenset({"type", "const", "enum", "properties", "required", "not", "anyOf",
                       "multipleOf",
                       *_VIOLATIONS})


def negate(node: Any, is_keyword: Callable[[str], bool], where: str) -> Any:
    """A schema accepting exactly the values ``node`` rejects (``is_keyword``: whether a
    key constrains; others are annotations)."""
    if node is True or node is False:
        return not node
    if not isinstance(node, dict):
        raise UnsupportedSchemaError(f"not at {where}: the subschema must be a schema")
    node = {k: v for k, v in node.items() if is_keyword(k)}
    unsupported = sorted(set(node) - NEGATABLE)
    if unsupported:
        raise UnsupportedSchemaError(
            f"not at {where}: the complement of {unsupported} is not supported")
    if not node:
        return False
    if set(node) == {"anyOf"} and isinstance(node["anyOf"], list):  # none of them
        return {"allOf": [negate(o, is_keyword, where) for o in node["anyOf"]]}
    types = _declared_types(node.get("type"), where)
    pieces: list[Any] = []
    if "type" in node:
        pieces += _other_types(types)
    if "const" in node or "enum" in node:
        values = [node["const"]] if "const" in node else node["enum"]
        if not isinstance(values, list):
            raise UnsupportedSchemaError(f"not at {where}: enum must be an array")
        pieces += _outside_values(values, where)
    for keyword, (kind, violation) in _VIOLATIONS.items():
        if keyword in node:
            pieces += _violating(kind, types, violation(node[keyword]))
    if "multipleOf" in node:
        pieces += _not_multiple(node["multipleOf"], types, where)
    for name, sub in (node.get("properties") or {}).items():
        if "object" in types:
            pieces.append({"type": "object", "required": [name],
                           "properties": {name: negate(sub, is_keyword, f"{where}/{name}")}})
    if "object" in types:  # an object without one of the names
        pieces += [{"type": "object", "propertyNames": {NOT_IN: [name]}}
                   for name in node.get("required", [])]
    if "not" in node:  # not(A and not X) = not A or X
        pieces.append(node["not"])
    return {"anyOf": pieces} if pieces else False


def conditional(node: dict, is_keyword: Callable[[str], bool], where: str) -> Any:
    """``node`` with ``if``/``then``/``else`` as ``anyOf[if and then, not-if and else]``
    (the two branches are disjoint); ``then``/``else`` without ``if`` are ignored."""
    rest = {k: v for k, v in node.items() if k not in CONDITIONAL}
    if "if" not in node or "then" not in node and "else" not in node:
        return rest
    condition = node["if"]
    branches = [{"allOf": [condition, node.get("then", True)]},
                {"allOf": [negate(condition, is_keyword, f"{where}/if"),
                           node.get("else", True)]}]
    return {"allOf": [rest, {"anyOf": branches}]}


def has_dependent_schemas(node: dict) -> bool:
    legacy = node.get("dependencies")
    return "dependentSchemas" in node or isinstance(legacy, dict) and any(
        not isinstance(v, list) for v in legacy.values())


def dependent_schemas(node: dict) -> dict:
    """``node`` with ``dependentSchemas`` (and draft 7 ``dependencies`` that map a name to
    a schema) as ``if`` {an object with the name} ``then`` {the schema}."""
    rest = {k: v for k, v in node.items() if k not in ("dependentSchemas", "dependencies")}
    pairs = list((node.get("dependentSchemas") or {}).items())
    legacy = node.get("dependencies")
    if isinstance(legacy, dict):
        pairs += [(n, v) for n, v in legacy.items() if not isinstance(v, list)]
        names = {n: v for n, v in legacy.items() if isinstance(v, list)}
        if names:
            rest["dependencies"] = names
    conditions = [{"if": {"type": "object", "required": [name]}, "then": schema}
                  for name, schema in pairs]
    return {"allOf": [rest, *conditions]}


def _declared_types(declared: Any, where: str) -> set[str]:
    if declared is None:
        return {*SCALAR_TYPES, "number", "integer"}
    names = {declared} if isinstance(declared, str) else set(declared)
    return names | ({"integer"} if "number" in names else set())


def _other_types(types: set[str]) -> list[dict]:
    pieces: list[dict] = [{"type": t} for t in SCALAR_TYPES if t not in types]
    if "number" not in types:
        pieces.append({"type": "number", NON_INTEGER: True} if "integer" in types
                      else {"type": "number"})
    return pieces


def _violating(kind: str, types: set[str], violation: tuple[str, Any] | None) -> list[dict]:
    if violation is None:
        return []
    if kind == "number":
        kind = "number" if "number" in types else "integer" if "integer" in types else ""
    if kind not in types:
        return []  # the keyword does not apply to the types allowed
    keyword, value = violation
    return [{"type": kind, keyword: value}]


def _not_multiple(step: Any, types: set[str], where: str) -> list[dict]:
    """The integers that are not multiples of the whole number ``step``. Numbers with a
    fraction are not multiples either, but are left out (a generation-time restriction:
    the digit-by-digit rules of the integers cannot share a position with a number
    regex that may continue them)."""
    if isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0 \
            or not float(step).is_integer():
        raise UnsupportedSchemaError(
            f"not at {where}: the complement of multipleOf {step!r} is not supported")
    if "integer" not in types or step == 1:
        return []
    return [{"type": "integer", NOT_MULTIPLE: int(step)}]


def _outside_values(values: list[Any], where: str) -> list[dict]:
    """The scalars (and containers) that are none of ``values``."""
    pieces: list[dict] = []
    if None not in values:
        pieces.append({"type": "null"})
    booleans = [b for b in (True, False) if not any(v is b for v in values)]
    if booleans:
        pieces.append({"enum": booleans})
    strings = [v for v in values if isinstance(v, str)]
    pieces.append({"type": "string", NOT_IN: strings} if strings else {"type": "string"})
    pieces += _numbers_outside(values, where)
    for kind, python_type in (("array", list), ("object", dict)):
        if any(isinstance(v, python_type) for v in values):
            raise UnsupportedSchemaError(
                f"not at {where}: the complement of an {kind} in enum/const is not supported")
        pieces.append({"type": kind})
    return pieces


def _numbers_outside(values: list[Any], where: str) -> list[dict]:
    numbers = sorted({v for v in values
                      if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if not numbers:
        return [{"type": "number"}]
    if not all(math.isfinite(v) and float(v).is_integer() for v in numbers):
        raise UnsupportedSchemaError(
            f"not at {where}: the complement of a fractional number is not supported")
    whole = sorted({int(v) for v in numbers})
    pieces = [{"type": "number", "exclusiveMaximum": whole[0]}]
    pieces += [{"type": "number", "exclusiveMinimum": a, "exclusiveMaximum": b}
               for a, b in pairwise(whole)]
    pieces.append({"type": "number", "exclusiveMinimum": whole[-1]})
    return pieces
