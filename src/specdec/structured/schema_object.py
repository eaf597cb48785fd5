"""Objects as rules: listed members in the order written, then additional ones.

Listed members are the names the schema spells out: ``properties``, then ``required``
and ``dependentRequired`` names that are not among them (their values checked by
``additionalProperties``), then the names a finite ``propertyNames`` allows. Additional
members follow, keyed by any other name (matching ``propertyNames``). The rules carry
what whole-object keywords need, so each is exact: the number of members so far
(``minProperties``/``maxProperties``, counted up to the bound that matters), the names
a present member requires later and the names skipped so far (``dependentRequired``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from specdec.structured.errors import ConstraintError, UnsupportedSchemaError
from specdec.structured.schema_keys import regex_difference
from specdec.structured.schema_not import NOT_IN
from specdec.structured.schema_strings import count, string_except, string_regex
from specdec.structured.schema_values import satisfies

MAX_COUNTED_MEMBERS = 64  # minProperties / maxProperties counted in rules up to this
# property_order="any": a rule per subset of listed members present (times the member
# counts that matter), up to these sizes; larger objects keep the order written.
MAX_ANY_ORDER_MEMBERS = 6
MAX_ANY_ORDER_STATES = 256
# propertyNames keywords that constrain names (strings); others do not apply to them.
_NAME_KEYS = frozenset({"type", "enum", "const", "minLength", "maxLength", "pattern",
                        "format", NOT_IN})
_NOT_FOR_STRINGS = frozenset({
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "items",
    "prefixItems", "minItems", "maxItems", "uniqueItems", "contains", "properties",
    "required", "additionalProperties", "minProperties", "maxProperties"})


@dataclass(frozen=True)
class Member:
    name: str
    key: str  # terminal of the name's spelling
    value: str  # rule of its value
    required: bool


class ObjectRules:
    """The rule of the objects ``node`` accepts, built by ``compiler``'s rule makers."""

    def __init__(self, compiler: Any, node: dict, where: str):
        self.c = compiler
        self.node = node
        self.where = where
        self.memo: dict[tuple, tuple[str | None, bool]] = {}
        self.excluded: list[str] = []  # names propertyNames forbids, when only those

    def build(self) -> str | None:
        node, where = self.node, self.where
        properties = node.get("properties", {})
        if not isinstance(properties, dict):
            raise ConstraintError(f"properties at {where} must be an object")
        required = node.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ConstraintError(f"required at {where} must be an array of strings")
        self.depends = self.dependencies()
        finite, name_regex = self.property_names()
        mode = self.c.additional_properties
        extra = node.get("additionalProperties",
                         {"open": True, "closed": False,
                          "listed": "properties" not in node
                          and "patternProperties" not in node}[mode])
        named_extra = node.get("additionalProperties", True)  # the specification's
        wanted = {**{n: (s, "properties") for n, s in properties.items()},
                  **{n: (named_extra, "additionalProperties")
                     for n in [*required, *(d for ds in self.depends.values() for d in ds),
                               *self.depends]
                     if n not in properties}}
        patterns = self.patterns()
        if patterns is not None:
            wanted = self.with_patterns(wanted, properties, *patterns)
        if finite is not None and self.c.value(extra, f"{where}/additionalProperties"):
            wanted.update({n: (extra, "additionalProperties") for n in finite
                           if n not in wanted})
        self.members = self.listed(wanted, required, finite, name_regex)
        if self.members is None:
            return None
        self.extra = None
        extra_rule = None if finite is not None else \
            self.c.value(extra, f"{where}/additionalProperties")
        if patterns is not None:
            if finite is not None or name_regex is not None:
                raise UnsupportedSchemaError(
                    f"patternProperties at {where} beside propertyNames is not supported")
            self.extra = self.pattern_members(list(wanted), *patterns, extra_rule)
        elif extra_rule is not None and name_regex != "":
            if name_regex is not None and wanted:
                raise UnsupportedSchemaError(
                    f"propertyNames at {where} beside listed properties and additional "
                    "properties is not supported")
            key = name_regex or string_except([*wanted, *self.excluded])
            self.extra = self.c.rule([f"{self.c.terminal(key)} COLON {extra_rule}"])
        self.low = count(node, "minProperties", where, 0)
        self.high = count(node, "maxProperties", where, None)
        if max(self.low, self.high or 0) > MAX_COUNTED_MEMBERS:
            raise UnsupportedSchemaError(
                f"minProperties/maxProperties above {MAX_COUNTED_MEMBERS} at {where}")
        if self.high is not None and self.low > self.high:
            return None
        if self.c.property_order == "any" and self.any_order_fits():
            body, empty = self.any_order(frozenset(), 0, True, True)
        else:
            body, empty = self.seq(0, True, 0, frozenset(), frozenset())
        if body is None:
            return self.c.rule(["LBRACE RBRACE"]) if empty else None
        return self.c.rule([f"LBRACE [{body}] RBRACE" if empty else f"LBRACE {body} RBRACE"])

    # ------------------------------------------------------------------ keywords

    def dependencies(self) -> dict[str, list[str]]:
        """``dependentRequired`` (and ``dependencies`` with name lists): name -> names."""
        out: dict[str, list[str]] = {}
        for keyword in ("dependentRequired", "dependencies"):
            value = self.node.get(keyword, {})
            if not isinstance(value, dict):
                raise ConstraintError(f"{keyword} at {self.where} must be an object")
            for name, names in value.items():
                if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                    raise UnsupportedSchemaError(
                        f"{keyword} at {self.where}: schema dependencies are not supported")
                out.setdefault(name, []).extend(n for n in names if n != name)
        return out

    def property_names(self) -> tuple[list[str] | None, str | None]:
        """(the names allowed when finitely many, else None; the regex of allowed name
        spellings, None when any, "" when none)."""
        names = self.c.deref(self.node.get("propertyNames", True), self.where)
        if names is False:
            return [], ""
        if names is True or not isinstance(names, dict):
            return None, None
        keys = {k for k in names if self.c.is_keyword(k)} - _NOT_FOR_STRINGS
        if keys == {NOT_IN}:  # names other than these: kept out of the listed and the rest
            self.excluded = list(names[NOT_IN])
            return None, None
        if not keys:
            return None, None
        if keys - _NAME_KEYS:
            raise UnsupportedSchemaError(
                f"propertyNames at {self.where}: {sorted(keys - _NAME_KEYS)} on names "
                "is not supported")
        declared = names.get("type", "string")
        if "string" not in ([declared] if isinstance(declared, str) else declared):
            return [], ""
        if "enum" in names or "const" in names:
            if "pattern" in names or "format" in names:
                raise UnsupportedSchemaError(
                    f"propertyNames at {self.where}: enum with pattern/format is not supported")
            values = [names["const"]] if "const" in names else names["enum"]
            if not isinstance(values, list):
                raise ConstraintError(f"enum at {self.where} must be an array")
            allowed = [v for v in values if isinstance(v, str) and satisfies(v, names)]
            return list(dict.fromkeys(allowed)), None
        regex = string_regex({k: names[k] for k in keys - {"type"}}, self.where)
        return None, "" if regex is None else regex

    def patterns(self) -> tuple[list[str], Any] | None:
        """(the regexes of the name spellings ``patternProperties`` matches, their one
        schema), or None without patterns. Patterns with different schemas are refused:
        a name matching several would need them all."""
        patterns = self.node.get("patternProperties")
        if not patterns:
            return None
        if not isinstance(patterns, dict):
            raise ConstraintError(f"patternProperties at {self.where} must be an object")
        schemas = {json.dumps(v, sort_keys=True) for v in patterns.values()}
        if len(schemas) > 1:
            raise UnsupportedSchemaError(
                f"patternProperties at {self.where}: patterns with different schemas may "
                "match one name; that is not supported")
        regexes = [string_regex({"pattern": p}, self.where) for p in patterns]
        return regexes, next(iter(patterns.values()))

    def with_patterns(self, wanted: dict[str, tuple[Any, str]], properties: dict,
                      regexes: list[str], schema: Any) -> dict[str, tuple[Any, str]]:
        """``wanted`` with a listed name that a pattern matches taking the pattern's
        schema too (beside its ``properties`` schema; instead of additionalProperties)."""
        out = dict(wanted)
        for name in wanted:
            if any(re.fullmatch(r, _spelling(name)) for r in regexes):
                both = {"allOf": [properties[name], schema]} if name in properties else schema
                self.c.keep.append(both)
                out[name] = (both, "patternProperties")
        return out

    def pattern_members(self, listed: list[str], regexes: list[str], schema: Any,
                        extra_rule: str | None) -> str | None:
        """The rule of a member that is not listed: keyed by a pattern (its schema), or by
        a name no pattern matches (``extra_rule``'s value, None: there are none). The
        keys leave out the listed names (and any name propertyNames excludes), so no
        name has two keys."""
        value = self.c.value(schema, f"{self.where}/patternProperties")
        left_out = [*listed, *self.excluded]
        alternatives = []
        if value is not None:
            key = "(?:" + "|".join(regexes) + ")"
            if any(re.fullmatch(key, _spelling(n)) for n in left_out):
                key = regex_difference(key, [_spellings(n) for n in left_out], self.where)
            if key is not None:
                alternatives.append(f"{self.c.terminal(key)} COLON {value}")
        if extra_rule is not None:  # plain spellings: each its name, so no pattern matches
            key = regex_difference(string_except(left_out), regexes, self.where)
            if key is not None:
                alternatives.append(f"{self.c.terminal(key)} COLON {extra_rule}")
        return self.c.rule(alternatives) if alternatives else None

    def listed(self, wanted: dict[str, tuple[Any, str]], required: list[str],
               finite: list[str] | None, name_regex: str | None) -> list[Member] | None:
        """The listed members that can appear (None: a required one cannot)."""
        rules: dict[str, str] = {}
        for name, (schema, keyword) in wanted.items():
            allowed = name in finite if finite is not None else name_regex is None or (
                name_regex != "" and re.fullmatch(name_regex, _spelling(name)) is not None)
            allowed = allowed and name not in self.excluded
            rule = self.c.value(schema, f"{self.where}/{keyword}") if allowed else None
            if rule is not None:
                rules[name] = rule
        changed = True
        while changed:  # a name whose dependents cannot appear cannot appear either
            changed = False
            for name, needs in self.depends.items():
                if name in rules and any(n not in rules for n in needs):
                    del rules[name]
                    changed = True
        if any(r not in rules for r in required):
            return None
        return [Member(n, self.c.terminal(re.escape(_spelling(n))), rules[n], n in required)
                for n in wanted if n in rules]

    # ------------------------------------------------------------------ rules

    def seq(self, i: int, first: bool, c: int, forced: frozenset[str],
            skipped: frozenset[str]) -> tuple[str | None, bool]:
        """(rule of the non-empty member lists from member i on, or None; whether the
        empty list is valid), after c members, with ``forced`` names still to come and
        ``skipped`` names absent; ``first``: nothing written before (no comma)."""
        key = (i, first, c, forced, skipped)
        if key not in self.memo:
            self.memo[key] = (self.extras(first, c) if i == len(self.members)
                              else self.member(i, first, c, forced, skipped))
        return self.memo[key]

    def member(self, i: int, first: bool, c: int, forced: frozenset[str],
               skipped: frozenset[str]) -> tuple[str | None, bool]:
        m = self.members[i]
        later = {x.name for x in self.members[i + 1:]}
        options = []
        needs = set(self.depends.get(m.name, []))
        if (self.high is None or c < self.high) and not needs & skipped:
            tail, empty = self.seq(i + 1, False, self.next_count(c),
                                   frozenset((forced | needs) & later), skipped)
            sep = "" if first else "COMMA "
            if tail is not None or empty:
                rest = "" if tail is None else f" [{tail}]" if empty else f" {tail}"
                options.append(f"{sep}{m.key} COLON {m.value}{rest}")
        empty = False
        if not m.required and m.name not in forced:
            gone = skipped | {m.name} if any(m.name in self.depends.get(x, []) for x in later) \
                else skipped
            tail, empty = self.seq(i + 1, first, c, forced, frozenset(gone))
            if tail is not None:
                options.append(tail)
        return (self.c.rule(options) if options else None), empty

    def any_order_fits(self) -> bool:
        """Whether the subsets of listed members (times the member counts that matter)
        are few enough for one rule each."""
        counts = 1 + (self.high if self.high is not None else self.low)
        return (len(self.members) <= MAX_ANY_ORDER_MEMBERS
                and counts << len(self.members) <= MAX_ANY_ORDER_STATES)

    def any_order(self, present: frozenset[str], c: int, first: bool,
                  extras: bool) -> tuple[str | None, bool]:
        """(rule of the non-empty member lists after the listed members ``present`` and
        c members in all, in any order, or None; whether the list may end here).
        ``extras``: additional members may come next (not right after a run of them:
        a run is one ``(COMMA extra)*``, so the stack stays flat however long it is)."""
        key = ("any", present, c, first, extras)
        if key not in self.memo:
            options = [self.any_listed(m, present, c, first) for m in self.members
                       if m.name not in present]
            if extras:
                options.append(self.any_extra(present, c, first))
            alive = [o for o in options if o is not None]
            self.memo[key] = (self.c.rule(alive) if alive else None), self.complete(present, c)
        return self.memo[key]

    def any_listed(self, m: Member, present: frozenset[str], c: int,
                   first: bool) -> str | None:
        if self.high is not None and c >= self.high:
            return None
        tail = self.any_order(present | {m.name}, self.next_count(c), False, True)
        return _then(f"{'' if first else 'COMMA '}{m.key} COLON {m.value}", *tail)

    def any_extra(self, present: frozenset[str], c: int, first: bool) -> str | None:
        if self.extra is None or self.high is not None and c >= self.high:
            return None
        sep = "" if first else "COMMA "
        if self.high is None and c >= self.low:  # any number more: one run of them
            tail = self.any_order(present, c, False, False)
            return _then(f"{sep}{self.extra} (COMMA {self.extra})*", *tail)
        tail = self.any_order(present, self.next_count(c), False, True)
        return _then(f"{sep}{self.extra}", *tail)

    def complete(self, present: frozenset[str], c: int) -> bool:
        """Whether an object may end with the listed members ``present``, c in all."""
        return c >= self.low and all(m.name in present for m in self.members if m.required) \
            and all(set(self.depends.get(name, [])) <= present for name in present)

    def extras(self, first: bool, c: int) -> tuple[str | None, bool]:
        """Additional members after c members."""
        empty = c >= self.low
        if self.extra is None or self.high is not None and c >= self.high:
            return None, empty
        if self.high is None and c >= self.low:  # any number more
            return self.c.rule([f"{self.extra} (COMMA {self.extra})*" if first
                                else f"(COMMA {self.extra})+"]), empty
        tail, tail_empty = self.extras(False, self.next_count(c))
        sep = "" if first else "COMMA "
        if tail is None:
            return (self.c.rule([f"{sep}{self.extra}"]) if tail_empty else None), empty
        rest = f" [{tail}]" if tail_empty else f" {tail}"
        return self.c.rule([f"{sep}{self.extra}{rest}"]), empty

    def next_count(self, c: int) -> int:
        """c + 1, or the count past which more members change nothing."""
        return c + 1 if self.high is not None else min(c + 1, self.low)


def _then(head: str, tail: str | None, empty: bool) -> str | None:
    """``head`` followed by the continuation ``tail`` (optional when ``empty``); None
    when nothing may follow and the list may not end either."""
    if tail is None:
        return head if empty else None
    return f"{head} [{tail}]" if empty else f"{head} {tail}"


def _spelling(name: str) -> str:
    return json.dumps(name, ensure_ascii=False)


def _spellings(name: str) -> str:
    """A regex of every JSON spelling of ``name`` the pattern regexes can match: one
    per character, but for '/' (also written \\/)."""
    return '"' + "".join(r"(?:/|\\/)" if char == "/" else re.escape(_spelling(char)[1:-1])
                         for char in name) + '"'
