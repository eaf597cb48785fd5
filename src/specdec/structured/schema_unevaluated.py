"""``unevaluatedProperties`` / ``unevaluatedItems`` where what is evaluated is static.

The properties (items) a schema evaluates are known before seeing an instance when
only ``properties`` (``prefixItems``) and keywords that evaluate everything
(``additionalProperties``, ``items``, a nested ``unevaluated*``) contribute, through
``allOf`` and ``$ref`` (every part applies) and ``not`` (which keeps no annotations).
Then ``unevaluatedProperties: U`` is ``additionalProperties: U`` beside the evaluated
names, and ``unevaluatedItems: U`` is ``items: U`` after the evaluated prefix.
Where it depends on the instance (``anyOf``/``oneOf``/``if`` branches that evaluate,
``patternProperties``, ``contains``, ``dependentSchemas``, ``$dynamicRef``) it is
refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specdec.structured.errors import UnsupportedSchemaError

ALL = None  # everything is evaluated
MAX_DEPTH = 32
_DYNAMIC = {
    "unevaluatedProperties": ("patternProperties", "dependentSchemas", "dependencies",
                              "$dynamicRef", "$recursiveRef"),
    "unevaluatedItems": ("contains", "$dynamicRef", "$recursiveRef"),
}
_BRANCHES = ("anyOf", "oneOf", "if", "then", "else")


def evaluated(keyword: str, node: Any, deref: Callable[[dict], Any], where: str,
              depth: int = 0) -> set[str] | int | None:
    """The property names (``unevaluatedProperties``) or the prefix length
    (``unevaluatedItems``) ``node`` evaluates in place; :data:`ALL` for everything."""
    if depth > MAX_DEPTH:
        raise UnsupportedSchemaError(f"{keyword} at {where}: $ref/allOf nest too deeply")
    properties = keyword == "unevaluatedProperties"
    none: set[str] | int = set() if properties else 0
    if not isinstance(node, dict):
        return none
    for dynamic in _DYNAMIC[keyword]:
        if dynamic in node:
            raise UnsupportedSchemaError(
                f"{keyword} at {where}: what {dynamic!r} evaluates depends on the instance")
    if keyword in node or ("additionalProperties" if properties else "items") in node:
        return ALL
    parts = list(node.get("allOf", []))
    if "$ref" in node:
        parts.append(deref(node))
    for branch in _BRANCHES:
        options = node.get(branch, [])
        for option in options if isinstance(options, list) else [options]:
            if evaluated(keyword, option, deref, where, depth + 1) != none:
                raise UnsupportedSchemaError(
                    f"{keyword} at {where}: what the {branch!r} branches evaluate "
                    "depends on the instance")
    found = set(node.get("properties", {})) if properties else len(node.get("prefixItems", []))
    for part in parts:
        more = evaluated(keyword, part, deref, where, depth + 1)
        if more is ALL:
            return ALL
        found = found | more if properties else max(found, more)
    return found


def lowered(keyword: str, merged: dict, found: set[str] | int, extra: Any) -> dict:
    """``merged`` (the schema without ``keyword``, ``allOf``/``$ref`` merged) with
    ``keyword: extra`` as ``additionalProperties`` / ``items``."""
    if keyword == "unevaluatedProperties":
        names = dict(merged.get("properties", {}))
        for name in sorted(found):
            names.setdefault(name, True)
        return {**merged, "properties": names, "additionalProperties": extra}
    prefix = list(merged.get("prefixItems", []))
    prefix += [True] * (found - len(prefix))
    return {**merged, "prefixItems": prefix, "items": extra}
