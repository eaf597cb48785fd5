"""Checking ``enum``/``const`` values against the keywords beside them.

``enum`` beside other keywords accepts the values that satisfy them all; those
keywords are evaluated here on each value (numbers by value, string lengths in code
points, as the specification says; ``pattern`` by the same ECMA-262 translation the
grammar uses). Keywords not listed are refused by the caller.
"""

from __future__ import annotations

import functools
import json
import re
from fractions import Fraction
from typing import Any

from specdec.structured.json_pattern import pattern_to_json_regex, spelled_by_patterns
from specdec.structured.schema_multiple import exact, is_multiple
from specdec.structured.schema_not import NON_INTEGER, NOT_IN, NOT_MULTIPLE

_NUMBER_CHECKS = {
    "minimum": lambda x, b: x >= b,
    "exclusiveMinimum": lambda x, b: x > b,
    "maximum": lambda x, b: x <= b,
    "exclusiveMaximum": lambda x, b: x < b,
}
_SIZE_CHECKS = {"minLength": (str, min), "maxLength": (str, max),
                "minItems": (list, min), "maxItems": (list, max)}
EVALUATED = frozenset({*_NUMBER_CHECKS, *_SIZE_CHECKS, NON_INTEGER, NOT_IN, NOT_MULTIPLE,
                       "multipleOf", "pattern"})


def satisfies(value: Any, node: dict) -> bool:
    """Whether ``value`` passes every keyword of ``node`` in :data:`EVALUATED`."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    for keyword, check in _NUMBER_CHECKS.items():
        bound = node.get(keyword)
        if number and isinstance(bound, (int, float)) and not isinstance(bound, bool) \
                and not check(value, bound):
            return False
    for keyword, (kind, side) in _SIZE_CHECKS.items():
        if keyword in node and isinstance(value, kind):
            size = len(value)
            if side is min and size < node[keyword] or side is max and size > node[keyword]:
                return False
    if node.get(NON_INTEGER) and number and float(value).is_integer():
        return False
    step = node.get("multipleOf")
    if number and isinstance(step, (int, float, Fraction)) and not isinstance(step, bool) \
            and step > 0 and not is_multiple(value, exact(step)):
        return False
    avoid = node.get(NOT_MULTIPLE)
    if number and avoid and (not float(value).is_integer() or is_multiple(value, exact(avoid))):
        return False
    if isinstance(value, str) and "pattern" in node and not matches_pattern(value,
                                                                             node["pattern"]):
        return False
    return not (isinstance(value, str) and value in node.get(NOT_IN, ()))


def matches_pattern(value: str, pattern: Any) -> bool:
    """Whether the string ``value`` matches the ECMA-262 ``pattern``, as the grammar
    decides it: its JSON spelling against the pattern's JSON-text regex (a character
    JSON can only write as ``\\uXXXX`` matches nothing, as it is never generated)."""
    if not isinstance(pattern, str):
        return True  # not a pattern: the grammar's own check refuses it
    body = json.dumps(value, ensure_ascii=False)[1:-1]
    return _json_regex(pattern).fullmatch(body) is not None


def decided_exactly(value: Any) -> bool:
    """Whether :func:`satisfies` is exact on ``value`` both ways: a string with a character
    JSON can only write as ``\\uXXXX`` (or a lone surrogate) fails every ``pattern`` here
    although the pattern may match it (right for what the grammar writes, not proof that
    the value fails)."""
    return not isinstance(value, str) or spelled_by_patterns(value)


@functools.lru_cache(maxsize=256)
def _json_regex(pattern: str) -> re.Pattern:
    return re.compile(pattern_to_json_regex(pattern))
