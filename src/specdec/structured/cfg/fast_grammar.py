"""The LALR table of a plain Lark grammar without lark's grammar loader or analyser.

Loading a grammar through ``lark.Lark`` costs ~10 ms for a typical JSON-schema grammar,
most of it lark parsing the grammar text with its own parser and rewriting the trees.
JSON-schema grammars use a small subset of Lark: ``rule: alternatives`` with names,
terminal names, ``"strings"``, ``( )``, ``[ ]``, ``*``, ``+``, ``?``, and
``NAME: /regex/flags`` or ``NAME: "string"`` terminals. For that subset this module
reads the text directly and rewrites EBNF to BNF the way lark's ``EBNF_to_BNF`` does
(the same helper rules, so the same LR automaton), then builds the table with
:mod:`.lalr_build` (lark's ``LALR_Analyzer``'s automaton, several times faster).
Anything outside the subset (directives, templates, aliases, priorities, rule
modifiers, comments, reduce/reduce conflicts, errors of any kind) returns None, and
the caller loads the grammar through lark, which also words the errors.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from itertools import product

from lark.exceptions import LarkError
from lark.lexer import Pattern, PatternStr, Token
from lark.load_grammar import _TERMINAL_NAMES, _literal_to_pattern
from lark.utils import is_id_continue, is_id_start

from specdec.structured.cfg.lalr import ParseRows
from specdec.structured.cfg.lalr_build import ReduceConflict, build_lalr

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\f\r]+)
  | (?P<nl>\n)
  | (?P<name>[_?!]?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<string>"(?:[^"\\\n]+|\\.)*+"i?)
  | (?P<regexp>/(?!/)(?:[^/\\]+|\\[\s\S])*+/[imslux]*)
  | (?P<op>[:|\[\]()*+?])
""", re.VERBOSE)
# string and regexp: lark's own token patterns ("(?:[^"\\\n]|\\.)*", /(?:\\/|\\\\|[^/])*?/)
# scanned in runs and without backtracking: the same tokens wherever a token ends

Item = tuple  # ("sym", name) | ("lit", kind, raw) | ("alts", alts) | ("opt", alts) | (op, item)
Alts = list  # list of sequences (lists of items)


class _Unsupported(Exception):
    """Outside the subset: lark loads the grammar instead."""


@dataclass
class FastGrammar:
    terminals: list[tuple[str, Pattern]]  # (name, pattern) in lark's order, used ones only
    parse_table: ParseRows


def fast_grammar(text: str, start: str = "start") -> FastGrammar | None:
    """The used terminals and LALR table of ``text``, or None (let lark load it)."""
    try:
        rules, terms = _parse(_tokens(text))
        return _compile(rules, terms, start)
    except (_Unsupported, LarkError, AssertionError):
        return None


def _tokens(text: str) -> list[tuple[str, str]]:
    """The grammar's tokens, line by line (lines recur across grammars: punctuation and
    shared terminals, common rules); the whole text at once if a token spans lines."""
    out: list[tuple[str, str]] = []
    try:
        for line in text.split("\n"):
            out.extend(_line_tokens(line) if len(line) < MAX_CACHED_LINE else _scan(line))
            out.append(("nl", "\n"))
    except _Unsupported:
        return [*_scan(text), ("nl", "\n")]
    return out


MAX_CACHED_LINE = 4096


@functools.lru_cache(maxsize=4096)
def _line_tokens(line: str) -> tuple[tuple[str, str], ...]:
    return _scan(line)


def _scan(text: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        if m.start() != pos:
            raise _Unsupported  # a character no token starts with
        pos = m.end()
        kind = m.lastgroup
        if kind != "ws":
            out.append((kind, m.group()))
    if pos != len(text):
        raise _Unsupported
    return tuple(out)


def _parse(tokens: list[tuple[str, str]]) -> tuple[dict[str, Alts], dict[str, tuple]]:
    """Statements ``NAME : expansions`` (continuation lines start with ``|``)."""
    rules: dict[str, Alts] = {}
    terms: dict[str, tuple] = {}
    i = 0
    while i < len(tokens):
        if tokens[i][0] == "nl":
            i += 1
            continue
        kind, name = tokens[i]
        if kind != "name" or tokens[i + 1] != ("op", ":") or not name[0].isalpha():
            raise _Unsupported  # also "_rule", "?rule", "!rule", "%directive", "rule.2"
        end = i + 2
        while tokens[end][0] != "nl" or (end + 1 < len(tokens) and tokens[end + 1] == ("op", "|")):
            end += 1
        body = [t for t in tokens[i + 2:end] if t[0] != "nl"]
        if name in rules or name in terms:
            raise _Unsupported
        if name.isupper():
            if len(body) != 1 or body[0][0] not in ("string", "regexp"):
                raise _Unsupported  # terminal compositions: lark
            terms[name] = body[0]
        else:
            alts, at = _alternatives(body, 0)
            if at != len(body):
                raise _Unsupported
            rules[name] = alts
        i = end
    return rules, terms


def _alternatives(body: list, at: int) -> tuple[Alts, int]:
    alts: Alts = []
    seq: list[Item] = []
    while at < len(body):
        kind, value = body[at]
        if value == "|" and kind == "op":
            alts.append(seq)
            seq = []
            at += 1
            continue
        if kind == "op" and value in ")]":
            break
        item, at = _atom(body, at)
        if at < len(body) and body[at][0] == "op" and body[at][1] in "*+?":
            item = (body[at][1], item)
            at += 1
        seq.append(item)
    alts.append(seq)
    return alts, at


def _atom(body: list, at: int) -> tuple[Item, int]:
    kind, value = body[at]
    if kind == "name":
        if not value[0].isalpha():
            raise _Unsupported
        return ("sym", value), at + 1
    if kind in ("string", "regexp"):
        return ("lit", kind, value), at + 1
    if kind == "op" and value in "([":
        inner, end = _alternatives(body, at + 1)
        close = ")" if value == "(" else "]"
        if end >= len(body) or body[end] != ("op", close):
            raise _Unsupported
        return ("alts" if value == "(" else "opt", inner), end + 1
    raise _Unsupported


class _Builder:
    """EBNF to BNF as lark's ``EBNF_to_BNF`` + ``SimplifyRule_Visitor`` do it."""

    def __init__(self, terms: dict[str, tuple]):
        self.terminals: list[tuple[str, Pattern]] = []
        self.by_name: dict[str, Pattern] = {}
        self.by_pattern: dict[Pattern, str] = {}  # the first terminal of each pattern
        for name, (kind, raw) in terms.items():
            self._add_terminal(name, _pattern(kind, raw))
        self.anonymous = 0  # lark's counter of __ANON_ names
        self.rules: list[tuple[str, list[tuple[str, str]]]] = []  # (origin, [(kind, name)])
        self.helpers: dict[object, str] = {}
        self.prefix = ""
        self.counter = 0

    def _add_terminal(self, name: str, pattern: Pattern) -> None:
        self.terminals.append((name, pattern))
        self.by_name[name] = pattern
        self.by_pattern.setdefault(pattern, name)  # equal: same type, value and flags

    def rule(self, name: str, alts: Alts) -> None:
        self.prefix = name
        self._emit(name, self.expand(alts))

    def _emit(self, name: str, expansions: list[tuple]) -> None:
        seen: set[tuple] = set()
        for expansion in expansions:
            if expansion not in seen:
                seen.add(expansion)
                self.rules.append((name, list(expansion)))

    def expand(self, alts: Alts) -> list[tuple]:
        """Every alternative as flat sequences of symbols (groups multiplied out)."""
        out: list[tuple] = []
        for seq in alts:
            parts = [self._item(item) for item in seq]
            out.extend(tuple(s for chunk in combo for s in chunk) for combo in product(*parts))
        return out

    def _item(self, item: Item) -> list[tuple]:
        kind = item[0]
        if kind == "sym":
            name = item[1]
            return [(("T" if name.isupper() else "N", name),)]
        if kind == "lit":
            return [(("T", self._anonymous(item[1], item[2])),)]
        if kind == "alts":
            return self.expand(item[1])
        if kind == "opt":
            return [*self.expand(item[1]), ()]
        inner = self._item(item[1])
        if kind == "?":
            return [*inner, ()]
        helper = self._helper("plus" if kind == "+" else "star", item[1], inner)
        return [(helper,)] if kind == "+" else [(helper,), ()]

    def _helper(self, kind: str, key: Item, inner: list[tuple]) -> tuple[str, str]:
        """``new: x | new x`` (lark's recursion rule), shared by equal ``x``."""
        name = self.helpers.get(_freeze(key))
        if name is None:
            name = self.helpers[_freeze(key)] = f"__{self.prefix}_{kind}_{self.counter}"
            self.counter += 1
            symbol = ("N", name)
            self._emit(name, [*inner, *((symbol, *x) for x in inner)])
        return ("N", name)

    def _anonymous(self, kind: str, raw: str) -> str:
        """The terminal of a literal in a rule, named as lark's ``PrepareAnonTerminals``
        names it (a defined terminal with the same pattern, else a new one)."""
        pattern = _pattern(kind, raw)
        if kind != "string" or pattern.flags:
            # lark orders anonymous terminals by its tree walk; only plain strings, which
            # never tie with another terminal of their rank, may come in another order
            raise _Unsupported
        name = self.by_pattern.get(pattern)
        if name is not None:
            return name
        if isinstance(pattern, PatternStr):
            value = pattern.value
            name = _TERMINAL_NAMES.get(value)
            if name is None and value and is_id_continue(value) and is_id_start(value[0]) \
                    and value.upper() not in self.by_name:
                name = value.upper()
            if name in self.by_name:
                name = None
        if name is None:
            name = f"__ANON_{self.anonymous}"
            self.anonymous += 1
        self._add_terminal(name, pattern)
        return name


@functools.lru_cache(maxsize=4096)
def _pattern(kind: str, raw: str) -> Pattern:
    """lark's pattern of a literal (shared: patterns are never changed)."""
    return _literal_to_pattern(Token(kind.upper(), raw))


def _freeze(item):
    if isinstance(item, list):
        return tuple(_freeze(x) for x in item)
    if isinstance(item, tuple):
        return tuple(_freeze(x) for x in item)
    return item


def _compile(rules: dict[str, Alts], terms: dict[str, tuple], start: str) -> FastGrammar:
    if start not in rules:
        raise _Unsupported
    builder = _Builder(terms)
    for name, alts in rules.items():
        builder.rule(name, alts)
    defined = set(rules) | set(builder.helpers.values())
    for _, expansion in builder.rules:
        for kind, name in expansion:
            if (kind == "N" and name not in defined) or (kind == "T"
                                                         and name not in builder.by_name):
                raise _Unsupported  # undefined symbol: lark says which
    compiled = _used_rules(builder.rules, start)
    used_terms = {name for _, expansion in compiled for kind, name in expansion if kind == "T"}
    try:
        table = build_lalr([(origin, tuple(name for _, name in expansion))
                            for origin, expansion in compiled], start)
    except ReduceConflict:
        raise _Unsupported from None  # lark words the error
    terminals = [(name, p) for name, p in builder.terminals if name in used_terms]
    return FastGrammar(terminals, table)


def _used_rules(rules: list, start: str) -> list:
    """lark's filter: drop rules no other rule refers to, until none is dropped."""
    while True:
        used = {name for origin, expansion in rules for kind, name in expansion
                if kind == "N" and name != origin} | {start}
        kept = [r for r in rules if r[0] in used]
        if len(kept) == len(rules):
            return kept
        rules = kept
