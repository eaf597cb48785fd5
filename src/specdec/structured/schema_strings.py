"""JSON strings as regexes of their spellings: length bounds counted in decoded
characters, ``pattern`` (translated by :mod:`json_pattern`), ``format`` as its syntax,
and the strings outside a set of names."""

from __future__ import annotations

import re

from specdec.structured.errors import ConstraintError, UnsupportedSchemaError
from specdec.structured.json_pattern import pattern_to_json_regex
from specdec.structured.schema_not import NOT_IN

MAX_STRING_LENGTH_BOUND = 2048  # minLength / maxLength counted in the lexer's automaton
STRING_KEYS = frozenset({"minLength", "maxLength", "pattern", "format"})

_JSON_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
# One decoded character, for counted lengths: a \u escape of a surrogate only as a pair.
_COUNTED_CHAR = (r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]'
                 r'|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})'
                 r'|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})')
STRING = f'"{_JSON_CHAR}*"'
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"  # RFC 1034's 63-byte limit not counted
_DATE = r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
_TIME = (r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?"
         r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}[Tt]{_TIME}",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "email": r"[A-Za-z0-9._%+-]+@" + _LABEL + r"(?:\." + _LABEL + r")+",
    "ipv4": rf"{_OCTET}(?:\.{_OCTET}){{3}}",
    "hostname": _LABEL + r"(?:\." + _LABEL + r")*",
    "uri": r"[A-Za-z][A-Za-z0-9+.-]*:(?:\\/|[A-Za-z0-9\-._~%!$&'()*+,;=:@?#\[\]])+",
}


def string_regex(node: dict, where: str) -> str | None:
    """The regex of the JSON spellings of the strings ``node`` accepts (None: none)."""
    if NOT_IN in node:
        if STRING_KEYS & set(node):
            raise UnsupportedSchemaError(
                f"string keywords on the complement of an enum at {where} are not supported")
        return string_except(node[NOT_IN])
    present = set(STRING_KEYS & set(node))
    fmt = node.get("format")
    if fmt is not None and fmt not in FORMATS:
        present.discard("format")  # an unknown format is an annotation
    if "pattern" in present and len(present) > 1 or "format" in present and len(present) > 1:
        raise UnsupportedSchemaError(
            f"{sorted(present)} together at {where} are not supported")
    if "pattern" in present:
        if not isinstance(node["pattern"], str):
            raise ConstraintError(f"pattern at {where} must be a string")
        return f'"{pattern_to_json_regex(node["pattern"], where)}"'
    if "format" in present:
        return f'"{FORMATS[fmt]}"'
    lo = count(node, "minLength", where, 0)
    hi = count(node, "maxLength", where, None)
    if hi is not None and lo > hi:
        return None
    if lo == 0 and hi is None:
        return STRING
    if max(lo, hi or 0) > MAX_STRING_LENGTH_BOUND:
        raise UnsupportedSchemaError(
            f"string length bounds above {MAX_STRING_LENGTH_BOUND} at {where}")
    return f'"{_COUNTED_CHAR}{{{lo},{"" if hi is None else hi}}}"'


def count(node: dict, key: str, where: str, default: int | None) -> int | None:
    if key not in node:
        return default
    value = node[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConstraintError(f"{key} at {where} must be a non-negative integer")
    return value


def string_except(names: list[str]) -> str:
    """A JSON string spelled without escapes whose value is none of ``names``."""
    plain = r'[^"\\\x00-\x1f]'
    words = [n for n in names if all(c not in '"\\' and ord(c) >= 0x20 for c in n)]
    if not words:
        return f'"{plain}*"'
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def body(node: dict) -> str:
        children = [c for c in node if c]
        parts = [] if "" in node else [""]
        others = "".join(re.escape(c) if c not in "]^-\\" else "\\" + c for c in children)
        parts.append(f'[^"\\\\\\x00-\\x1f{others}]{plain}*' if others else f"{plain}+")
        parts += [re.escape(c) + body(node[c]) for c in children]
        return "(?:" + "|".join(parts) + ")"

    return f'"{body(trie)}"'
