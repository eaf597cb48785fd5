"""A JSON-schema ``pattern`` (ECMA-262) as a regex over the *JSON text* of a string.

``pattern`` constrains the decoded string; the model writes its JSON spelling, where
a newline is ``\\n`` and a quote ``\\"``. So each character the pattern allows becomes
the ways JSON may spell it: itself where it may appear raw, its escape where it must
(or may) be escaped. Matching the pattern against the escaped text instead would let
``^\\\\n$`` (backslash, n) accept a newline, or ``.`` end the string with a raw quote.

ECMA-262 semantics, not Python's: ``\\d`` is ``[0-9]``, ``\\w`` ``[A-Za-z0-9_]``, ``.``
any character but line terminators, ``$`` only the very end; the pattern matches
anywhere unless anchored. Lookarounds, backreferences, ``\\b`` and flags are refused.
Characters JSON can only spell as ``\\uXXXX`` (controls other than ``\\b\\f\\n\\r\\t``)
are left out: never generated, so never accepted.
"""

from __future__ import annotations

import re
import sys

from specdec.structured.errors import UnsupportedSchemaError

try:  # Python 3.11+: the parser behind re
    from re import _constants as sre_constants
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

MAX_CHAR = sys.maxunicode
Ranges = list[tuple[int, int]]

_ESCAPES = {0x22: r'\\"', 0x5C: r"\\\\", 0x2F: r"\\/", 0x08: r"\\b", 0x0C: r"\\f",
            0x0A: r"\\n", 0x0D: r"\\r", 0x09: r"\\t"}
# Characters JSON may write raw: all but '"', '\', U+0000..U+001F (and surrogates,
# which are not characters of UTF-8 text).
_RAW: Ranges = [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, MAX_CHAR)]
_DIGIT: Ranges = [(0x30, 0x39)]
_WORD: Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE: Ranges = sorted([(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680),
                         (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F),
                         (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)])
_NOT_SURROGATE: Ranges = [(0, 0xD7FF), (0xE000, MAX_CHAR)]
_LINE_TERMINATORS: Ranges = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]


def spelled_by_patterns(text: str) -> bool:
    """Whether every character of ``text`` is one the pattern regexes spell (raw, or a
    short escape); the others (controls JSON writes as ``\\uXXXX``, lone surrogates)
    are left out of every pattern's regex."""
    return all(ord(c) in _ESCAPES or any(lo <= ord(c) <= hi for lo, hi in _RAW)
               for c in text)


def normalize(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for lo, hi in sorted(r for r in ranges if r[0] <= r[1]):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def complement(ranges: Ranges) -> Ranges:
    out, start = [], 0
    for lo, hi in normalize(ranges):
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CHAR:
        out.append((start, MAX_CHAR))
    return out


def intersect(a: Ranges, b: Ranges) -> Ranges:
    out = []
    for lo1, hi1 in normalize(a):
        for lo2, hi2 in normalize(b):
            lo, hi = max(lo1, lo2), min(hi1, hi2)
            if lo <= hi:
                out.append((lo, hi))
    return normalize(out)


def class_char(code: int) -> str:
    """The code point ``code`` as it may stand inside a regex character class."""
    char = chr(code)
    if char in "\\]^-[":
        return "\\" + char
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    return char


def _class_body(ranges: Ranges) -> str:
    return "".join(class_char(lo) if lo == hi else f"{class_char(lo)}-{class_char(hi)}"
                   for lo, hi in ranges)


def json_char_regex(ranges: Ranges) -> str | None:
    """A regex for the JSON spellings of one character in ``ranges`` (None: none)."""
    ranges = normalize(ranges)
    raw = intersect(ranges, _RAW)
    parts = []
    if raw and raw[-1][1] == MAX_CHAR:
        # Open-ended (e.g. '.' or [^a]): spell it as a negated class of what it leaves
        # out, so the automaton keeps one "anything else" edge instead of every character.
        left_out = [r for r in complement(raw) if not (r[0] >= 0xD800 and r[1] <= 0xDFFF)]
        parts.append(f"[^{_class_body(intersect(left_out, _NOT_SURROGATE))}]")
    elif raw:
        parts.append(f"[{_class_body(raw)}]")
    parts += [escape for code, escape in _ESCAPES.items() if intersect(ranges, [(code, code)])]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


_ANY_JSON_CHAR = json_char_regex([(0, MAX_CHAR)])  # one JSON-spelled character of any kind


def pattern_to_json_regex(pattern: str, where: str = "#") -> str:
    """The regex of the JSON string *bodies* (between the quotes) whose decoded value
    matches ``pattern`` somewhere (ECMA-262 ``RegExp.test`` semantics)."""
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        raise UnsupportedSchemaError(f"pattern {pattern!r} at {where} is invalid: {exc}") from None
    if parsed.state.flags & ~(re.UNICODE | getattr(re, "NOFLAG", 0)):
        raise UnsupportedSchemaError(f"pattern {pattern!r} at {where}: inline flags unsupported")
    items = list(parsed)
    branches = [items]
    if len(items) == 1 and items[0][0] is sre_constants.BRANCH:
        branches = [list(b) for b in items[0][1][1]]
    out = []
    for branch in branches:
        start = bool(branch) and branch[0] == (sre_constants.AT, sre_constants.AT_BEGINNING)
        end = bool(branch) and branch[-1] == (sre_constants.AT, sre_constants.AT_END)
        core = branch[int(start): len(branch) - int(end)]
        body = _Translator(pattern, where).sequence(core)
        prefix = "" if start else f"{_ANY_JSON_CHAR}*"
        suffix = "" if end else f"{_ANY_JSON_CHAR}*"
        out.append(f"{prefix}(?:{body}){suffix}")
    return out[0] if len(out) == 1 else "(?:" + "|".join(out) + ")"


class _Translator:
    def __init__(self, pattern: str, where: str):
        self.pattern = pattern
        self.where = where

    def refuse(self, what: str):
        raise UnsupportedSchemaError(
            f"pattern {self.pattern!r} at {self.where}: {what} is not supported "
            "(only regular constructs: no lookarounds, backreferences or \\b)")

    def sequence(self, items) -> str:
        return "".join(self.item(op, av) for op, av in items)

    def item(self, op, av) -> str:
        c = sre_constants
        if op is c.LITERAL:
            return self.chars([(av, av)])
        if op is c.NOT_LITERAL:
            return self.chars(complement([(av, av)]))
        if op is c.ANY:
            return self.chars(complement(_LINE_TERMINATORS))
        if op is c.IN:
            return self.chars(self.char_class(av))
        if op is c.BRANCH:
            return "(?:" + "|".join(self.sequence(b) for b in av[1]) + ")"
        if op is c.SUBPATTERN:
            _, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                self.refuse("a group with flags")
            return "(?:" + self.sequence(sub) + ")"
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)):
            lo, hi, sub = av
            body = "(?:" + self.sequence(sub) + ")"
            if hi is c.MAXREPEAT:
                return f"{body}{{{lo},}}" if lo > 1 else body + ("*" if lo == 0 else "+")
            return f"{body}{{{lo},{hi}}}"
        if op is c.CATEGORY:
            return self.chars(self.category(av))
        if op is c.AT:
            self.refuse("an anchor inside the pattern" if av in (c.AT_BEGINNING, c.AT_END)
                        else "a word-boundary or string anchor")
        if op in (c.ASSERT, c.ASSERT_NOT):
            self.refuse("a lookaround")
        if op in (c.GROUPREF, getattr(c, "GROUPREF_EXISTS", None)):
            self.refuse("a backreference")
        self.refuse(f"the construct {op}")
        raise AssertionError  # unreachable

    def chars(self, ranges: Ranges) -> str:
        regex = json_char_regex(ranges)
        if regex is None:
            self.refuse("a character class JSON output can never contain")
        return regex

    def char_class(self, av) -> Ranges:
        c = sre_constants
        ranges: Ranges = []
        negate = False
        for op, arg in av:
            if op is c.NEGATE:
                negate = True
            elif op is c.LITERAL:
                ranges.append((arg, arg))
            elif op is c.RANGE:
                ranges.append(arg)
            elif op is c.CATEGORY:
                ranges += self.category(arg)
            else:
                self.refuse(f"the class item {op}")
        return complement(ranges) if negate else normalize(ranges)

    def category(self, name) -> Ranges:
        c = sre_constants
        table = {c.CATEGORY_DIGIT: _DIGIT, c.CATEGORY_WORD: _WORD, c.CATEGORY_SPACE: _SPACE}
        negated = {c.CATEGORY_NOT_DIGIT: _DIGIT, c.CATEGORY_NOT_WORD: _WORD,
                   c.CATEGORY_NOT_SPACE: _SPACE}
        if name in table:
            return list(table[name])
        if name in negated:
            return complement(negated[name])
        self.refuse(f"the character category {name}")
        raise AssertionError  # unreachable
