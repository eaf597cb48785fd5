"""JSON schema -> a Lark grammar for specdec's CFG engine (``structured/cfg/``).

Each schema node becomes a rule; ``$ref`` recursion is a rule that refers to itself.
Terminals are plain regexes (strings with their length bounds counted in decoded
characters, ``pattern`` translated to the JSON spelling by :mod:`json_pattern`,
integer ranges by :mod:`int_range`). Every construct's language is a subset of what
the schema allows, so the engine can be stricter than the schema, never looser:

* enforced exactly: ``type`` (and lists), ``enum``/``const`` (numbers compare by value:
  ``1.0`` matches ``1``; beside bounds, lengths or ``multipleOf`` the values are checked),
  ``properties``/``required``/``additionalProperties`` (false, true or a schema),
  ``propertyNames``, ``minProperties``/``maxProperties``, ``dependentRequired`` (and
  draft 7 ``dependencies``), ``dependentSchemas`` (``if`` {an object with the name}
  ``then`` {the schema}), ``patternProperties`` (one schema for all patterns; a listed
  name a pattern matches takes both schemas; additional properties are the names no
  pattern matches, :mod:`schema_keys`),
  ``items``/``prefixItems``/``minItems``/``maxItems`` (draft 7 ``items`` lists and
  ``additionalItems`` too), ``contains``/``minContains``/``maxContains`` (each item a hit
  or a miss of ``contains``, hits counted), ``minLength``/``maxLength``, ``pattern``,
  ``minimum``/``maximum``/``exclusive*`` (integers: any bound; numbers: any bound of up
  to 64 fraction digits, bounded numbers written without an exponent), ``multipleOf``
  on integers and on unbounded numbers (:mod:`schema_multiple`), ``anyOf``, ``oneOf``
  (alternatives that cannot overlap, or each made exclusive with the complement of the
  others), ``not`` and ``if``/``then``/``else`` where the complement is expressible
  (:mod:`schema_not`: ``type``, scalar ``const``/``enum``, bounds, lengths, whole
  ``multipleOf``, ``properties``, ``required``, ``anyOf``),
  ``allOf`` and ``$ref`` beside other keywords (merged: bounds to the tighter one,
  ``multipleOf`` to the least common multiple, ``not`` to ``not`` ``anyOf``,
  ``properties``/``additionalProperties`` and ``prefixItems``/``items`` position by
  position, two ``anyOf`` distributed), ``unevaluatedProperties``/``unevaluatedItems``
  where what is evaluated is static (:mod:`schema_unevaluated`), ``$ref``/``$defs``/
  ``definitions``/``$anchor``/``$id``-relative pointers within the document,
  ``$dynamicRef`` where it always resolves to one schema, boolean schemas,
  ``uniqueItems: false``;
* generation-time restrictions (stricter than the schema, documented): properties in
  the order written (listed ones, then additional ones; ``property_order="any"``: listed
  ones in any order, additional ones anywhere, for objects of up to 6 listed
  properties), additional properties spelled without escapes,
  integers without an exponent (``1``; ``1.0`` too with ``integer_fraction``; beside
  bounds, the multiples of a fractional ``multipleOf`` are generated as integer
  multiples),
  ``const``/``enum`` objects of more than 4 members (or a long regex) in the order
  written (smaller ones in any order), ``format`` (date, time, date-time,
  uuid, email, ipv4, hostname, uri) enforced as its syntax (without RFC length limits),
  non-integer numbers (the complement of ``integer``) without an exponent and, beside
  fractional bounds, within the whole numbers inside them, whitespace by ``whitespace``;
* refused by name (:class:`UnsupportedSchemaError`): ``uniqueItems: true``,
  ``$recursiveRef``, remote ``$ref`` without ``retrieve``, ``multipleOf`` above 256 or
  with bounds other than 0, the complement of what :mod:`schema_not` cannot express (``not``,
  ``if``, overlapping ``oneOf``), ``unevaluated*`` whose evaluated set depends on the
  instance, ``patternProperties`` with different schemas or beside ``propertyNames``,
  ``propertyNames`` beside listed and additional properties, ``$dynamicRef`` with
  several ``$dynamicAnchor`` of its name,
  ``allOf`` parts constraining one keyword in ways not merged above, and combinations
  that would need an intersection (``pattern`` with ``maxLength``). Annotations and
  unknown keywords are ignored, as the specification says.

Additional properties (``additional_properties``): ``"listed"`` (the default, a
generation-time restriction like xgrammar's): an object that lists ``properties`` takes
no others unless ``additionalProperties`` allows them explicitly (small models invent
keys otherwise); one that lists none takes any. ``"open"``: the specification's default,
extra properties unless ``additionalProperties`` forbids them. ``"closed"`` (OpenAI's
strict mode, ``strict=True``): only where ``additionalProperties`` allows them.

Property order (``property_order``): ``"written"`` (the default, as OpenAI's strict mode
and llguidance do: a schema listing ``reasoning`` before ``answer`` gets them in that
order); ``"any"``: the specification's, listed properties in any order, each at most
once, with a rule per subset of those present (objects of up to 6 listed properties;
larger ones keep the order written).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

from specdec.structured.errors import ConstraintError, UnsupportedSchemaError
from specdec.structured.int_range import (
    MAX_BOUND_DIGITS,
    decimal_range_regex,
    fraction_range_regex,
    int_range_regex,
    number_range_regex,
)
from specdec.structured.schema_multiple import (
    common_multiple,
    decimal_multiples,
    decimal_places,
    decimal_regex,
    integer_residues,
    multiple_of,
)
from specdec.structured.schema_not import (
    CONDITIONAL,
    INTERNAL,
    NON_INTEGER,
    NOT_IN,
    NOT_MULTIPLE,
    conditional,
    dependent_schemas,
    has_dependent_schemas,
    negate,
)
from specdec.structured.schema_object import ObjectRules
from specdec.structured.schema_refs import SchemaIndex, is_legacy_draft
from specdec.structured.schema_strings import (  # noqa: F401 - FORMATS, _COUNTED_CHAR re-exported
    _COUNTED_CHAR,
    FORMATS,
    STRING,
    STRING_KEYS,
    string_except,
    string_regex,
)
from specdec.structured.schema_strings import count as _count
from specdec.structured.schema_unevaluated import ALL, evaluated, lowered
from specdec.structured.schema_union import is_plain, plain_members, union_of_objects
from specdec.structured.schema_values import EVALUATED, decided_exactly, satisfies

COMPACT_WHITESPACE = r"[ ]?"  # at most one space around punctuation
MAX_EXPANDED_ITEMS = 64  # maxItems / minItems unrolled into rules up to this count
MAX_MERGE_DEPTH = 32
MAX_DISTRIBUTED = 64  # alternatives of anyOf parts distributed over each other
MAX_PERMUTED_MEMBERS = 4  # const/enum objects up to this size match in any member order
MAX_PERMUTED_REGEX = 4096  # ... while the alternatives' regex stays this short

# Validation keywords this compiler does not enforce: refused, never ignored.
REFUSED = frozenset({"$recursiveRef"})
NUMBER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
NUMBER_KEYS = frozenset({*NUMBER_BOUNDS, "multipleOf"})
UNEVALUATED = ("unevaluatedProperties", "unevaluatedItems")
ARRAY_KEYS = frozenset({"items", "prefixItems", "additionalItems", "minItems", "maxItems",
                        "uniqueItems", "contains", "minContains", "maxContains"})
OBJECT_KEYS = frozenset({"properties", "required", "additionalProperties", "propertyNames",
                         "patternProperties",
                         "minProperties", "maxProperties", "dependentRequired",
                         "dependencies"})
ALL_TYPES = ("null", "boolean", "object", "array", "string", "number")
# Keywords whose meaning depends on a sibling: merged only when they come from one part.
_COUPLED = (frozenset({"items", "additionalItems"}), frozenset(CONDITIONAL),
            frozenset({"patternProperties", "additionalProperties"}))
# Keyword pairs merged position by position across allOf parts (see _merge_shapes).
_SHAPES = {"object": ("properties", "additionalProperties"), "array": ("prefixItems", "items")}
_MISSING = object()
_STRUCTURAL = frozenset({"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "not",
                         "$dynamicRef", "dependentSchemas",
                         *CONDITIONAL, *NUMBER_KEYS, *STRING_KEYS, *ARRAY_KEYS,
                         *OBJECT_KEYS, *UNEVALUATED, *REFUSED, *INTERNAL})
# allOf parts that bound one keyword differently merge to the tighter bound.
_LOWER_BOUNDS = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems",
                           "minProperties"})
_UPPER_BOUNDS = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems",
                           "maxProperties"})

NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
INTEGER = r"-?(?:0|[1-9][0-9]*)"
# An integer may be written with a zero fraction: 1.0 is the integer 1 (JSON Schema
# counts values, not spellings).
ZERO_FRACTION = r"\.0+"
NON_INTEGER_NUMBER = r"-?(?:0|[1-9][0-9]*)\.[0-9]*[1-9][0-9]*"  # written without an exponent


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


def schema_to_lark(schema: Any, whitespace: str | None = None, strict: bool = False,
                   additional_properties: str = "listed",
                   retrieve: Callable[[str], Any] | None = None,
                   default_draft: str = "2020-12", property_order: str = "written",
                   integer_fraction: bool = False) -> str:
    """The Lark grammar of the JSON texts ``schema`` accepts (see the module doc).
    ``whitespace``: a regex allowed around punctuation (default ``[ ]?``); ``strict``:
    ``additional_properties="closed"``; ``retrieve``: URI -> schema for ``$ref``s to
    other documents (offline use; nothing is ever fetched); ``default_draft``: the draft
    of a schema without ``$schema`` (draft 7 and earlier: ``$ref`` ignores its siblings);
    ``property_order``: ``"written"`` or ``"any"`` (see the module doc);
    ``integer_fraction``: integers may also be spelled with a zero fraction (``1.0``, as
    the specification counts values); off by default, a generation-time restriction (a
    model let to write ``99.`` can pad zeros up to its token limit)."""
    if additional_properties not in ("listed", "open", "closed"):
        raise ValueError(f"additional_properties must be listed, open or closed, "
                         f"got {additional_properties!r}")
    if property_order not in ("written", "any"):
        raise ValueError(f"property_order must be written or any, got {property_order!r}")
    if not isinstance(schema, bool):
        schema = schema_to_dict(schema)
        _refuse_internal_keywords(schema)
    mode = "closed" if strict else additional_properties
    return _Compiler(schema, whitespace or COMPACT_WHITESPACE, mode, retrieve,
                     default_draft, property_order, integer_fraction).grammar()


INTERNAL_PREFIX = "x-specdec-"  # keywords the compiler writes for complements (schema_not)


def _refuse_internal_keywords(schema: Any) -> None:
    """A client's schema may not spell the compiler's internal keywords: they would change
    what it means (vendor ``x-*`` keywords are otherwise ignored, as the spec says)."""
    stack = [(schema, "#")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, str) and key.startswith(INTERNAL_PREFIX):
                    raise UnsupportedSchemaError(
                        f"{key} at {where}: keywords starting with {INTERNAL_PREFIX} are "
                        "reserved for the compiler")
                stack.append((value, f"{where}/{key}"))
        elif isinstance(node, list):
            stack.extend((item, f"{where}/{i}") for i, item in enumerate(node))


class _Compiler:
    def __init__(self, root: Any, whitespace: str, additional_properties: str,
                 retrieve: Callable[[str], Any] | None = None,
                 default_draft: str = "2020-12", property_order: str = "written",
                 integer_fraction: bool = False):
        self.root = root
        self.integer_fraction = integer_fraction
        self.whitespace = whitespace
        self.additional_properties = additional_properties
        self.property_order = property_order
        self.rules: dict[str, str] = {}
        self.bodies: dict[str, str] = {}  # rule body -> the first rule with it
        self.terminals: dict[str, str] = {}  # regex -> terminal name
        self.memo: dict[int, str | None] = {}  # id(schema node) -> rule (None: no value)
        self.building: set[str] = set()  # value rules whose body is being made
        self.recursive: set[str] = set()  # value rules referred to from their own body
        self.keep: list[Any] = []  # merged nodes, alive so their ids stay unique
        self.legacy = is_legacy_draft(root, default_draft)
        self.refs = SchemaIndex(root, retrieve, ref_overrides_siblings=self.legacy)
        self.counter = 0

    # ------------------------------------------------------------------ output

    def grammar(self) -> str:
        start = self.value(self.root, "#")
        self.refs.check_dynamic("#")
        if start is None:
            raise ConstraintError("the JSON schema accepts no value")
        ws = self.whitespace
        lines = ["start: " + start]
        lines += [f"{name}: {body}" for name, body in self.rules.items()]
        for literal, name in (("{", "LBRACE"), ("[", "LSQB")):
            lines.append(f"{name}: /{_lark_regex(re.escape(literal) + ws)}/")
        for literal, name in (("}", "RBRACE"), ("]", "RSQB")):
            lines.append(f"{name}: /{_lark_regex(ws + re.escape(literal))}/")
        lines.append(f"COMMA: /{_lark_regex(ws + ',' + ws)}/")
        lines.append(f"COLON: /{_lark_regex(ws + ':' + ws)}/")
        lines += [f"{name}: /{_lark_regex(regex)}/" for regex, name in self.terminals.items()]
        return "\n".join(lines) + "\n"

    def terminal(self, regex: str) -> str:
        if regex not in self.terminals:
            self.terminals[regex] = f"T{len(self.terminals)}"
        return self.terminals[regex]

    def rule(self, body_alternatives: list[str], name: str | None = None) -> str:
        """A rule with these alternatives (``name``: that rule's); an unnamed one with
        the body of an existing rule is that rule (one language, one rule: unions of
        equal parts reduce one way)."""
        body = " | ".join(body_alternatives)
        if name is None:
            if body in self.bodies:
                return self.bodies[body]
            name = self.new_name()
        self.rules[name] = body
        if body:
            self.bodies.setdefault(body, name)
        return name

    def new_name(self) -> str:
        self.counter += 1
        return f"n{self.counter}"

    # ------------------------------------------------------------------ values

    def value(self, node: Any, where: str, depth: int = 0) -> str | None:
        """A rule for the values ``node`` accepts; None when it accepts none."""
        if node is True:
            node = {}
        if node is False:
            return None
        if not isinstance(node, dict):
            raise ConstraintError(f"schema at {where} must be an object or a boolean, "
                                  f"got {type(node).__name__}")
        if not _constrains(node):
            return self.any_value()
        key = id(node)
        if key in self.memo:
            if self.memo[key] in self.building:
                self.recursive.add(self.memo[key])
            return self.memo[key]
        name = self.new_name()
        self.memo[key] = name  # before the body: recursion refers to the rule by name
        self.building.add(name)
        alternatives = self.alternatives(node, where, depth)
        self.building.discard(name)
        if not alternatives:
            self.memo[key] = None
            self.rules.pop(name, None)
            return None
        same = self.bodies.get(" | ".join(alternatives))
        if same is not None and name not in self.recursive:
            # Equal schemas at two places (anyOf branches listing one property): one
            # rule, else LALR cannot choose which of two equal rules to reduce.
            self.memo[key] = same
            return same
        self.rule(alternatives, name)
        return name

    def any_value(self) -> str:
        if "any_value" not in self.rules:
            self.rules["any_value"] = ""  # reserve the name: the body refers to itself
            string = self.terminal(STRING)
            member = f"{string} COLON any_value"
            self.rules["any_value"] = " | ".join([
                '"null"', '"true"', '"false"', self.terminal(NUMBER), string,
                "LSQB [any_value (COMMA any_value)*] RSQB",
                f"LBRACE [{member} (COMMA {member})*] RBRACE"])
        return "any_value"

    def alternatives(self, node: dict, where: str, depth: int) -> list[str]:
        for keyword in node:
            if keyword in REFUSED:
                raise UnsupportedSchemaError(
                    f"JSON schema keyword {keyword!r} at {where} is not supported")
        if depth > MAX_MERGE_DEPTH:
            raise UnsupportedSchemaError(f"schema at {where} nests $ref/allOf too deeply")
        if "$dynamicRef" in node:
            return self.alternatives(self.static_ref(node, where), where, depth + 1)
        if any(k in node for k in UNEVALUATED):
            return self.merged_alternatives(self.lower(node, where), where, depth)
        if "$ref" in node:
            target = self.resolve(node["$ref"], node, where)
            rest = {k: v for k, v in node.items() if k != "$ref" and not self.legacy}
            if not _constrains(rest):
                rule = self.value(target, f"{where}/$ref", depth + 1)
                return [rule] if rule else []
            return self.merged_alternatives(self.merge([target, rest], where), where, depth)
        if has_dependent_schemas(node):
            rewritten = dependent_schemas(node)
            self.keep.append(rewritten)
            return self.merged_alternatives(self.merge([rewritten], where), where, depth)
        if "not" in node or any(k in node for k in CONDITIONAL):
            return self.merged_alternatives(self.logic(node, where), where, depth)
        if "allOf" in node:
            parts = node["allOf"]
            if not isinstance(parts, list) or not parts:
                raise ConstraintError(f"allOf at {where} must be a non-empty array")
            rest = {k: v for k, v in node.items() if k != "allOf"}
            return self.merged_alternatives(self.merge([rest, *parts], where), where, depth)
        for keyword in ("anyOf", "oneOf"):
            if keyword in node:
                return self.union(node, keyword, where, depth)
        return self.typed(node, where)

    def merged_alternatives(self, merged: Any, where: str, depth: int) -> list[str]:
        if merged is False:
            return []
        if not _constrains(merged):
            return [self.any_value()]
        return self.alternatives(merged, where, depth + 1)

    def union(self, node: dict, keyword: str, where: str, depth: int) -> list[str]:
        options = node[keyword]
        if not isinstance(options, list) or not options:
            raise ConstraintError(f"{keyword} at {where} must be a non-empty array")
        rest = {k: v for k, v in node.items() if k != keyword}
        branches, kept = [], []
        for i, option in enumerate(options):
            merged = option if not _constrains(rest) else self.merge([rest, option], where)
            if merged is False:
                continue
            branches.append((merged, f"{where}/{keyword}/{i}"))
            kept.append(option)
        if keyword == "oneOf" and not self.pairwise_exclusive([b for b, _ in branches], where):
            branches = self.exclusive(branches, kept, where)
        # Plain object branches as one object grammar (see schema_union): an object
        # two of them accept has one derivation.
        out: list[str] = []
        plain = [(i, plain_members(self, branch, at))
                 for i, (branch, at) in enumerate(branches)] if len(branches) > 1 else []
        plain = [(i, members) for i, members in plain if members is not None]
        merged = union_of_objects(self, [m for _, m in plain]) if len(plain) > 1 else None
        if merged is not None:
            out.append(merged)
            taken = {i for i, _ in plain}
            branches = [b for i, b in enumerate(branches) if i not in taken]
        # The other branches' alternatives side by side, each once: a value two
        # branches accept the same way reduces one way.
        for branch, at in branches:
            for alternative in self.branch_alternatives(branch, at, depth + 1):
                if alternative not in out:
                    out.append(alternative)
        return ["any_value"] if "any_value" in out else out

    def branch_alternatives(self, branch: Any, where: str, depth: int) -> list[str]:
        if branch is False:
            return []
        if branch is True or not _constrains(branch):
            return [self.any_value()]
        if not isinstance(branch, dict):
            raise ConstraintError(f"schema at {where} must be an object or a boolean")
        return self.alternatives(branch, where, depth)

    def pairwise_exclusive(self, nodes: list[Any], where: str) -> bool:
        """Whether no value satisfies two of ``nodes`` (then oneOf is their anyOf), as far
        as :meth:`evidently_exclusive` can tell."""
        if _pairwise_disjoint(nodes):
            return True
        if len(nodes) > MAX_DISTRIBUTED:
            return False
        return all(self.generated_apart(a, b, where)
                   for i, a in enumerate(nodes) for b in nodes[i + 1:])

    def generated_apart(self, a: Any, b: Any, where: str) -> bool:
        """Whether no value the grammar writes for ``a`` satisfies ``b`` and none it
        writes for ``b`` satisfies ``a`` (then their oneOf is exact as their anyOf):
        no value satisfies both, or each is a plain object (listed names only, see
        :mod:`schema_union`) the other requires a name it never writes for."""
        if self.evidently_exclusive(a, b, where):
            return True
        return self.writes_outside(a, b, where) and self.writes_outside(b, a, where)

    def writes_outside(self, a: Any, b: Any, where: str) -> bool:
        """Whether every object written for ``a`` (a plain object schema) lacks a name
        ``b`` requires, so fails ``b``."""
        a, b = self.in_effect(a, where), self.in_effect(b, where)
        if not is_plain(self, a) or not isinstance(b, dict):
            return False
        return any(name not in a["properties"] for name in _names(b.get("required")))

    def evidently_exclusive(self, a: Any, b: Any, where: str, depth: int = 0) -> bool:
        """True when no value satisfies both ``a`` and ``b``, seen from their types, their
        finite value sets, or a property both require whose schemas are exclusive (a
        discriminator such as ``"kind": {"const": ...}``); False when unsure. Only what
        each schema itself requires is read, so what else it says can only agree."""
        a, b = self.in_effect(a, where), self.in_effect(b, where)
        if a is False or b is False:
            return True
        if not isinstance(a, dict) or not isinstance(b, dict):
            return False
        types_a, types_b = self.types_of(a, where), self.types_of(b, where)
        if not _compatible_types(types_a, types_b):
            return True
        values_a, values_b = self.values_of(a, where), self.values_of(b, where)
        if values_a is not None and values_b is not None:
            return not any(_json_equal(x, y) for x in values_a for y in values_b)
        for values, other, other_types in ((values_a, b, types_b), (values_b, a, types_a)):
            if values is not None and not any(
                    _compatible_types({_json_type(v)}, other_types)
                    and (satisfies(v, other) or not decided_exactly(v)) for v in values):
                return True  # none of one's values passes the other's own checks
        if depth >= MAX_MERGE_DEPTH or not types_a & types_b <= {"object"}:
            return False
        shared = set(_names(a.get("required"))) & set(_names(b.get("required")))
        props_a, props_b = a.get("properties"), b.get("properties")
        if not isinstance(props_a, dict) or not isinstance(props_b, dict):
            return False
        return any(self.evidently_exclusive(props_a[name], props_b[name], where, depth + 1)
                   for name in sorted(shared) if name in props_a and name in props_b)

    def types_of(self, node: Any, where: str, depth: int = 0) -> set[str]:
        """The JSON types ``node`` may allow at most: its own, narrowed by its ``allOf``
        parts and by the union of its ``anyOf``/``oneOf`` options."""
        types = _possible_types(node)
        if not isinstance(node, dict) or depth >= 4:
            return types
        for part in node.get("allOf", []) if isinstance(node.get("allOf"), list) else []:
            types = _common_types(types, self.types_of(self.in_effect(part, where), where,
                                                       depth + 1))
        for keyword in ("anyOf", "oneOf"):
            options = node.get(keyword)
            if isinstance(options, list) and options:
                union = set().union(*(self.types_of(self.in_effect(o, where), where, depth + 1)
                                      for o in options))
                types = _common_types(types, union)
        return types

    def values_of(self, node: dict, where: str, depth: int = 0) -> list[Any] | None:
        """The values ``node`` allows at most: its ``const``/``enum``, narrowed by those of
        its ``allOf`` parts; None if none of them lists values."""
        values = _finite_values(node)
        parts = node.get("allOf") if depth < 4 else None
        for part in parts if isinstance(parts, list) else []:
            part = self.in_effect(part, where)
            found = self.values_of(part, where, depth + 1) if isinstance(part, dict) else None
            if found is not None:
                values = found if values is None else \
                    [v for v in values if any(_json_equal(v, w) for w in found)]
        return values

    def in_effect(self, node: Any, where: str) -> Any:
        """``node`` as far as its own keywords go: behind a ``$ref`` alone, or behind any
        ``$ref`` in drafts where it overrides its siblings."""
        node = self.deref(node, where)
        for _ in range(MAX_MERGE_DEPTH):
            if not (self.legacy and isinstance(node, dict) and "$ref" in node):
                return node
            node = self.deref(self.resolve(node["$ref"], node, where), where)
        return True  # too deep to tell: unsure

    def exclusive(self, branches: list[tuple[Any, str]], options: list[Any],
                  where: str) -> list[tuple[Any, str]]:
        """oneOf's branches made disjoint: each one and not the others (refused where a
        complement is not expressible)."""
        try:
            others = [negate(self.deref(o, where), _constraining_keyword, where)
                      for o in options]
            out = []
            for i, (branch, at) in enumerate(branches):
                merged = self.merge([branch, *others[:i], *others[i + 1:]], where)
                if merged is not False:
                    out.append((merged, at))
            return out
        except UnsupportedSchemaError as exc:
            raise UnsupportedSchemaError(
                f"oneOf at {where}: its alternatives may overlap and exactly-one cannot be "
                f"enforced ({exc}); use anyOf if any match is fine") from None

    def lower(self, node: dict, where: str) -> Any:
        """``node`` with ``unevaluated*`` as ``additionalProperties``/``items`` (see
        :mod:`schema_unevaluated`), or without them where everything is evaluated."""
        for keyword in UNEVALUATED:
            if keyword not in node:
                continue
            extra = node[keyword]
            node = {k: v for k, v in node.items() if k != keyword}
            if extra is not False and not _constrains(extra):
                continue
            found = evaluated(keyword, node, lambda n: self.resolve(n["$ref"], n, where), where)
            if found is ALL:
                continue
            merged = self.merge([node], where)
            if merged is False:
                return False
            node = lowered(keyword, merged, found, extra)
        self.keep.append(node)
        return node

    def logic(self, node: dict, where: str) -> Any:
        """``node`` without ``if``/``then``/``else`` (a union) or ``not`` (its complement,
        intersected with the rest)."""
        if any(k in node for k in CONDITIONAL):
            rewritten = conditional(node, _constraining_keyword, where)
        else:
            rest = {k: v for k, v in node.items() if k != "not"}
            complement = negate(self.deref(node["not"], where), _constraining_keyword, where)
            rewritten = self.merge([rest, complement], where)
        self.keep.append(rewritten)
        return rewritten

    def static_ref(self, node: dict, where: str) -> dict:
        """``node`` with its ``$dynamicRef`` as the ``$ref`` it always amounts to."""
        ref = {"$ref": self.refs.static_dynamic_ref(node["$dynamicRef"], node, where)}
        rest = {k: v for k, v in node.items() if k != "$dynamicRef"}
        out = {**rest, **ref} if "$ref" not in rest else {**rest, "allOf": [
            *rest.get("allOf", []), ref]}
        self.keep.append(out)
        return out

    def deref(self, node: Any, where: str) -> Any:
        """``node``, or what it refers to when it is a ``$ref`` alone."""
        for _ in range(MAX_MERGE_DEPTH):
            if isinstance(node, dict) and "$dynamicRef" in node:
                node = self.static_ref(node, where)
            if not isinstance(node, dict) or "$ref" not in node or _constrains(
                    {k: v for k, v in node.items() if k != "$ref"}):
                return node
            node = self.resolve(node["$ref"], node, where)
        raise UnsupportedSchemaError(f"schema at {where} nests $ref too deeply")

    def merge(self, parts: list[Any], where: str) -> Any:
        """One schema equal to the conjunction of ``parts``, or refuse."""
        merged: dict = {}
        origin: dict[str, set[int]] = {}
        shapes: dict[str, list[tuple[Any, Any]]] = {shape: [] for shape in _SHAPES}
        for index, part in enumerate(parts):
            if part is True:
                continue
            if part is False:
                return False
            if not isinstance(part, dict):
                raise ConstraintError(f"allOf entry at {where} must be a schema")
            if "$dynamicRef" in part:
                part = self.static_ref(part, where)
            while "$ref" in part and not _constrains({k: v for k, v in part.items()
                                                      if k != "$ref"}):
                part = self.resolve(part["$ref"], part, where)
                if part is True or part is False:
                    break
            if part is False:
                return False
            if part is True:
                continue
            if any(k in part for k in UNEVALUATED):
                part = self.lower(part, where)
                if part is False:
                    return False
            if has_dependent_schemas(part):
                part = dependent_schemas(part)
                self.keep.append(part)
            if any(k in part for k in CONDITIONAL):  # the part's own if/then/else
                part = conditional(part, _constraining_keyword, where)
                self.keep.append(part)
            if "$ref" in part or "allOf" in part:
                part = self.flatten(part, where)
                if part is False:
                    return False
            for shape, keys in _SHAPES.items():
                if any(k in part for k in keys) and _shape_mergeable(part):
                    shapes[shape].append(tuple(part.get(k, _MISSING) for k in keys))
                    for key in keys & part.keys():
                        origin.setdefault(key, set()).add(index)
                    part = {k: v for k, v in part.items() if k not in keys}
            for keyword, value in part.items():
                if not _constraining_keyword(keyword):
                    continue
                if keyword not in merged:
                    merged[keyword] = value
                elif _identical(merged[keyword], value):
                    continue
                elif keyword == "const" and not _json_equal(merged[keyword], value):
                    return False  # two different values: nothing satisfies both
                else:
                    merged[keyword] = _merge_keyword(keyword, merged[keyword], value, where)
                origin.setdefault(keyword, set()).add(index)
        for shape, keys in _SHAPES.items():
            if shapes[shape]:
                for key, value in zip(keys, _merge_shapes(shapes[shape]), strict=True):
                    if value is not _MISSING:
                        merged[key] = value
        for group in _COUPLED:
            present = group & set(origin)
            sources = set().union(*(origin[k] for k in present))
            if len(present) > 1 and len(sources) > 1:
                raise UnsupportedSchemaError(
                    f"allOf at {where}: {sorted(present)} come from different "
                    "parts; their intersection is not supported")
        if merged.get("type") == []:
            return False
        self.keep.append(merged)
        return merged

    def flatten(self, part: dict, where: str) -> Any:
        pieces: list[Any] = [{k: v for k, v in part.items() if k not in ("$ref", "allOf")}]
        if "$ref" in part:
            pieces.append(self.resolve(part["$ref"], part, where))
        pieces += part.get("allOf", [])
        return self.merge(pieces, where)

    # ------------------------------------------------------------------ types

    def typed(self, node: dict, where: str) -> list[str]:
        types = _types(node, where)
        if "enum" in node or "const" in node:
            return self.enum(node, types, where)
        out = []
        for kind in ("null", "boolean", "integer", "number", "string", "array", "object"):
            if kind not in types or (kind == "integer" and "number" in types):
                continue
            part = getattr(self, f"type_{kind}")(node, where)
            if part is not None:
                out.append(part)
        return out

    def type_null(self, node, where):
        return '"null"'

    def type_boolean(self, node, where):
        return self.rule(['"true"', '"false"'])

    def type_integer(self, node, where):
        if node.get(NON_INTEGER):
            return None
        lo, hi = _integer_bounds(node, where)
        if lo is not None and hi is not None and lo > hi:
            return None
        step = multiple_of(node, where)
        avoid = node.get(NOT_MULTIPLE)
        if step is not None and step.numerator > 1 or avoid:
            digits = self.multiples(1 if step is None else step.numerator, avoid, lo, hi, where)
            if digits is None or not self.integer_fraction:
                return digits
            return self.rule([f"{digits} [{self.terminal(ZERO_FRACTION)}]"])
        regex = INTEGER if lo is None and hi is None else int_range_regex(lo, hi)
        return self.terminal(regex + (f"(?:{ZERO_FRACTION})?" if self.integer_fraction else ""))

    def type_number(self, node, where):
        if NOT_MULTIPLE in node:  # integers only (see schema_not)
            return self.type_integer(node, where)
        if node.get(NON_INTEGER):
            step = multiple_of(node, where)
            if step is not None and step.denominator == 1:
                return None  # no number with a fraction is a multiple of an integer
            if step is not None:
                raise UnsupportedSchemaError(
                    f"multipleOf on the complement of integers at {where} is not supported")
            if not any(k in node for k in NUMBER_BOUNDS):
                return self.terminal(NON_INTEGER_NUMBER)
            lo, hi, _, _ = _number_bounds(node, where)
            regex = fraction_range_regex(lo, hi)
            return None if regex is None else self.terminal(regex)
        step = multiple_of(node, where)
        if step is not None:
            places = decimal_places(step)
            if places is None and step.denominator > 1 and not any(
                    k in node for k in NUMBER_BOUNDS):
                alternatives = decimal_multiples(step, self.rule, where)
                if alternatives is not None:
                    return self.rule(alternatives)
            if not places:  # integer multiples (beside bounds: a generation-time restriction)
                return self.type_integer(node, where)
            if any(k in node for k in NUMBER_BOUNDS):
                raise UnsupportedSchemaError(
                    f"multipleOf {node['multipleOf']} with bounds at {where} is not supported")
            return self.terminal(decimal_regex(places, where))
        if not any(k in node for k in NUMBER_BOUNDS):
            return self.terminal(NUMBER)
        fractional = _decimal_bounds(node)
        regex = decimal_range_regex(*fractional) if fractional is not None else \
            number_range_regex(*_number_bounds(node, where))
        return None if regex is None else self.terminal(regex)

    def multiples(self, p: int, avoid: int | None, lo: int | None, hi: int | None,
                  where: str) -> str | None:
        """Integer multiples of ``p`` (not of ``avoid``) between ``lo`` and ``hi``:
        bounds only at 0."""
        if lo not in (None, 0, 1) or hi not in (None, 0, -1):
            raise UnsupportedSchemaError(
                f"multipleOf with bounds other than 0 at {where} is not supported")
        signs = (lo is None, lo in (None, 0) and hi in (None, 0), hi is None)
        alternatives = integer_residues(p, avoid, self.rule, where, signs)
        return self.rule(alternatives) if alternatives else None

    def type_string(self, node, where):
        regex = string_regex(node, where)
        return None if regex is None else self.terminal(regex)

    def type_array(self, node, where):
        if node.get("uniqueItems") not in (None, False):
            raise UnsupportedSchemaError(f"uniqueItems at {where} is not supported")
        if "contains" in node:
            return self.array_contains(node, where)
        prefix, rest = _array_shape(node, where)
        prefix_rules = []
        for i, sub in enumerate(prefix):
            rule = self.value(sub, f"{where}/prefixItems/{i}")
            if rule is None:  # no value for position i: arrays end before it
                break
            prefix_rules.append(rule)
        rest_rule = None if rest is False or len(prefix_rules) < len(prefix) else \
            self.value(rest, f"{where}/items")
        lo = _count(node, "minItems", where, 0)
        hi = _count(node, "maxItems", where, None)
        longest = len(prefix_rules) if rest_rule is None else hi
        if longest is not None and hi is not None:
            longest = min(longest, hi)
        if longest is not None and lo > longest:
            return None
        if longest is not None and longest > MAX_EXPANDED_ITEMS or lo > MAX_EXPANDED_ITEMS:
            raise UnsupportedSchemaError(
                f"array bounds at {where} need more than {MAX_EXPANDED_ITEMS} unrolled items")

        def element(i: int) -> str:
            return prefix_rules[i] if i < len(prefix_rules) else rest_rule

        # seq(i): the elements from position i on, position i present.
        def seq(i: int) -> str:
            more = longest is None or i + 1 < longest
            if not more:
                return element(i)
            if longest is None and i >= len(prefix_rules) and i + 1 >= lo:
                return self.rule([f"{element(i)} (COMMA {element(i)})*"])
            tail = seq(i + 1)
            if i + 1 < lo:
                return self.rule([f"{element(i)} COMMA {tail}"])
            return self.rule([f"{element(i)} [COMMA {tail}]"])

        if longest == 0:
            return self.rule(["LSQB RSQB"])
        body = seq(0)
        return self.rule([f"LSQB {body} RSQB" if lo > 0 else f"LSQB [{body}] RSQB"])

    def array_contains(self, node: dict, where: str) -> str | None:
        """Arrays whose items all match ``items`` and between ``minContains`` and
        ``maxContains`` of them ``contains``: each item is a hit (``items`` and
        ``contains``) or a miss (``items`` and not ``contains``), and the rules count the
        hits so far, up to the count past which more change nothing."""
        if {"prefixItems", "minItems", "maxItems"} & set(node) or isinstance(
                node.get("items"), list):
            raise UnsupportedSchemaError(
                f"contains with prefixItems/minItems/maxItems at {where} is not supported")
        items = node.get("items", True)
        wanted = self.deref(node["contains"], where)
        low = 1 if self.legacy else _count(node, "minContains", where, 1)
        high = None if self.legacy else _count(node, "maxContains", where, None)
        if high is not None and low > high:
            return None
        unwanted = negate(wanted, _constraining_keyword, where)
        hit = self.value(self.merge([items, wanted], where), f"{where}/contains")
        miss = self.value(self.merge([items, unwanted], where), f"{where}/contains")
        cap = high if high is not None else low  # more hits than cap: the same as cap
        names = [self.new_name() for _ in range(cap + 1)]

        def alive(c: int) -> bool:  # another item may follow c hits
            return miss is not None or hit is not None and (high is None or c < high)

        def then(c: int) -> str | None:  # after an item, with c hits so far
            if not alive(c):
                return "" if c >= low else None
            return f" [COMMA {names[c]}]" if c >= low else f" COMMA {names[c]}"

        for c in range(cap + 1):
            options = []
            if hit is not None and (high is None or c < high) and then(min(c + 1, cap)) is not None:
                options.append(hit + then(min(c + 1, cap)))
            if miss is not None and then(c) is not None:
                options.append(miss + then(c))
            if options:
                self.rule(options, names[c])
        empty = ["LSQB RSQB"] if low == 0 else []
        if names[0] not in self.rules:
            return self.rule(empty) if empty else None
        return self.rule([f"LSQB {names[0]} RSQB", *empty])

    # ------------------------------------------------------------------ objects

    def type_object(self, node, where):
        return ObjectRules(self, node, where).build()

    @staticmethod
    def is_keyword(keyword: str) -> bool:
        return _constraining_keyword(keyword)

    def enum(self, node: dict, types: set[str], where: str) -> list[str]:
        if "const" in node:
            values = [node["const"]]
        elif isinstance(node["enum"], list):
            values = node["enum"]
        else:
            raise ConstraintError(f"enum at {where} must be an array")
        if "const" in node and "enum" in node:
            values = [v for v in values if any(_json_equal(v, e) for e in node["enum"])]
        others = set(node) & (_STRUCTURAL - {"type", "enum", "const"} - EVALUATED)
        if others:
            raise UnsupportedSchemaError(
                f"enum/const together with {sorted(others)} at {where} are not supported")
        regexes = []
        for value in values:
            if not satisfies(value, node):
                continue
            if _json_type(value) in types or (_json_type(value) == "integer"
                                              and "number" in types):
                regexes.append(_value_regex(value))
        return [self.terminal(r) for r in dict.fromkeys(regexes)]

    # ------------------------------------------------------------------ refs

    def resolve(self, ref: Any, holder: Any, where: str) -> Any:
        return self.refs.resolve(ref, holder, where)



# ---------------------------------------------------------------------- helpers


def _lark_regex(regex: str) -> str:
    """``regex`` inside Lark's ``/.../``: '/' escaped; '"' as \\x22, since Lark's
    unescaping turns the regex ``\\\\"`` (backslash, quote) into ``\\"`` (a quote)."""
    return regex.replace("/", "\\/").replace('"', "\\x22")


def _pointer_escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _shape_mergeable(part: dict) -> bool:
    """Whether ``part``'s properties/items merge position by position (draft 7 item
    lists and ``additionalItems`` do not)."""
    return not isinstance(part.get("items"), list) and "additionalItems" not in part


def _merge_shapes(parts: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """The conjunction of (``properties``, ``additionalProperties``) pairs (or
    (``prefixItems``, ``items``)): each name (position) takes its own schema from a part
    that lists it and that part's schema for the rest from one that does not."""
    if len(parts) == 1:
        return parts[0]
    listed = [named for named, _ in parts if named is not _MISSING]
    by_name = isinstance(next(iter(listed), {}), dict)
    keys = list(dict.fromkeys(k for named in listed for k in named)) if by_name else \
        list(range(max((len(named) for named in listed), default=0)))

    def both(schemas: list[Any]) -> Any:
        schemas = [s for s in schemas if s is not True and s is not _MISSING]
        return True if not schemas else schemas[0] if len(schemas) == 1 else {"allOf": schemas}

    def own(named: Any, rest: Any, key: Any) -> Any:
        if named is _MISSING:
            return rest
        return named[key] if (key in named if by_name else key < len(named)) else rest

    merged_named = [both([own(named, rest, k) for named, rest in parts]) for k in keys]
    rests = [rest for _, rest in parts if rest is not _MISSING]
    return (_MISSING if not listed else dict(zip(keys, merged_named, strict=True))
            if by_name else merged_named,
            both(rests) if rests else _MISSING)


def _merge_keyword(keyword: str, a: Any, b: Any, where: str) -> Any:
    """The conjunction of two values of ``keyword`` (from different allOf parts)."""
    if keyword == "type":
        return _intersect_types(a, b)
    if keyword == "required":
        return list(dict.fromkeys([*a, *b]))
    if keyword == "const":  # equal by value (1 and 1.0): different ones were refused above
        return a
    if keyword == "enum" and isinstance(a, list) and isinstance(b, list):
        return [v for v in a if any(_json_equal(v, w) for w in b)]
    numeric = all(isinstance(v, (int, float, Fraction)) and not isinstance(v, bool)
                  for v in (a, b))
    if keyword in _LOWER_BOUNDS and numeric:
        return max(a, b)
    if keyword in _UPPER_BOUNDS and numeric:
        return min(a, b)
    if keyword == "anyOf" and isinstance(a, list) and isinstance(b, list):
        if len(a) * len(b) > MAX_DISTRIBUTED:
            raise UnsupportedSchemaError(
                f"allOf at {where}: two anyOf make more than {MAX_DISTRIBUTED} alternatives")
        return [{"allOf": [x, y]} for x in a for y in b]
    if keyword == "multipleOf" and numeric and min(a, b) > 0:
        return common_multiple(a, b)
    if keyword == "not":  # not a and not b: not (a or b)
        return {"anyOf": [a, b]}
    if keyword == "propertyNames" and all(isinstance(v, dict) and set(v) == {NOT_IN}
                                          for v in (a, b)):
        return {NOT_IN: list(dict.fromkeys([*a[NOT_IN], *b[NOT_IN]]))}
    if keyword == "prefixItems" and isinstance(a, list) and isinstance(b, list):
        longer, shorter = (a, b) if len(a) >= len(b) else (b, a)
        return [{"allOf": [x, shorter[i]]} if i < len(shorter) else x
                for i, x in enumerate(longer)]
    if keyword == "properties" and isinstance(a, dict) and isinstance(b, dict):
        both = dict(a)
        for name, sub in b.items():
            both[name] = {"allOf": [both[name], sub]} if name in both else sub
        return both
    raise UnsupportedSchemaError(
        f"allOf at {where}: two parts both constrain {keyword!r}; "
        "their intersection is not supported")


def _constraining_keyword(keyword: str) -> bool:
    return keyword in _STRUCTURAL


def _constrains(node: Any) -> bool:
    return node is False or (isinstance(node, dict) and any(map(_constraining_keyword, node)))


def _types(node: dict, where: str) -> set[str]:
    declared = node.get("type")
    if declared is None:
        return set(ALL_TYPES) | {"integer"}
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, list) or not all(isinstance(t, str) for t in names):
        raise ConstraintError(f"type at {where} must be a string or an array of strings")
    unknown = set(names) - set(ALL_TYPES) - {"integer"}
    if unknown:
        raise ConstraintError(f"unknown type(s) {sorted(unknown)} at {where}")
    return set(names)


def _intersect_types(a: Any, b: Any) -> list[str]:
    def expand(t):
        names = {t} if isinstance(t, str) else set(t)
        return names | ({"integer"} if "number" in names else set())

    both = expand(a) & expand(b)
    if "number" in both:
        return ["number"]
    return sorted(both)


def _possible_types(node: Any) -> set[str]:
    if node is True or not isinstance(node, dict):
        return set(ALL_TYPES) | {"integer"}
    if "const" in node:
        return {_json_type(node["const"])}
    if isinstance(node.get("enum"), list):
        return {_json_type(v) for v in node["enum"]}
    declared = node.get("type")
    if declared is None:
        return set(ALL_TYPES) | {"integer"}
    names = {declared} if isinstance(declared, str) else set(declared)
    return names | ({"integer"} if "number" in names else set())


def _pairwise_disjoint(nodes: list[Any]) -> bool:
    seen: set[str] = set()
    for node in nodes:
        types = _possible_types(node)
        if "integer" in types and "number" in seen or "number" in types and "integer" in seen:
            return False
        if types & seen:
            return False
        seen |= types
    return True


def _compatible_types(a: set[str], b: set[str]) -> bool:
    """Whether some value has a type in both (an integer is a number)."""
    return bool(_common_types(a, b))


def _common_types(a: set[str], b: set[str]) -> set[str]:
    """The types in both sets (``number`` keeps the integers of the other)."""
    common = a & b
    if "number" in a and "integer" in b or "number" in b and "integer" in a:
        common.add("integer")
    return common


def _finite_values(node: dict) -> list[Any] | None:
    """The values ``node`` allows at most (its ``const`` or ``enum``), or None if unbounded."""
    if "const" in node:
        return [node["const"]]
    enum = node.get("enum")
    return enum if isinstance(enum, list) else None


def _names(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _identical(a: Any, b: Any) -> bool:
    """Equal as JSON text is (``True`` is not ``1``, ``1`` is not ``1.0``): Python's ``==``
    would merge ``{"const": true}`` with ``{"const": 1}`` as one."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_identical, a, b))
    return a == b


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or isinstance(value, float) and value.is_integer():
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _json_equal(a: Any, b: Any) -> bool:
    """Equal as JSON values (numbers by value; ``true`` is not ``1``, at any depth)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() \
            and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) \
            and all(map(_json_equal, a, b))
    return a == b


def _value_regex(value: Any) -> str:
    """The JSON spellings of ``value`` (compact; a number by its value)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return re.escape(json.dumps(value, ensure_ascii=False))
    if isinstance(value, (int, float)):
        return _number_regex(value)
    if isinstance(value, list):
        return r"\[" + ",".join(_value_regex(v) for v in value) + r"\]"
    members = [re.escape(json.dumps(k, ensure_ascii=False)) + ":" + _value_regex(v)
               for k, v in value.items()]
    orders = [members]
    if len(members) <= MAX_PERMUTED_MEMBERS:  # an object's members in any order
        orders = [list(order) for order in itertools.permutations(members)]
        if sum(map(len, itertools.chain(*orders))) > MAX_PERMUTED_REGEX:
            orders = [members]  # too large: the order written (a generation-time restriction)
    bodies = [r"\{" + ",".join(order) + r"\}" for order in orders]
    return bodies[0] if len(bodies) == 1 else "(?:" + "|".join(bodies) + ")"


def _number_regex(value: int | float) -> str:
    """Spellings of one number: ``1``, ``1.0``, ``1.00``... for an integral value."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConstraintError(f"non-finite number {value!r} in enum/const")
    if isinstance(value, int) or value.is_integer():
        text = str(int(value))
        return re.escape(text) + r"(?:\.0+)?" if text != "0" else r"-?0(?:\.0+)?"
    text = repr(float(value))
    if "e" in text or "E" in text:
        return re.escape(text)
    return re.escape(text) + "0*"


def _integer_bounds(node: dict, where: str) -> tuple[int | None, int | None]:
    def number(key: str) -> float:
        value = node[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConstraintError(f"{key} at {where} must be a number, got {value!r}")
        return value

    lo = hi = None
    if "minimum" in node:
        lo = math.ceil(number("minimum"))
    if "exclusiveMinimum" in node:
        value = node["exclusiveMinimum"]
        if value is True or value is False:  # draft 4 spelling
            raise UnsupportedSchemaError(f"boolean exclusiveMinimum at {where} (draft 4)")
        bound = math.floor(number("exclusiveMinimum")) + 1
        lo = bound if lo is None else max(lo, bound)
    if "maximum" in node:
        hi = math.floor(number("maximum"))
    if "exclusiveMaximum" in node:
        value = node["exclusiveMaximum"]
        if value is True or value is False:
            raise UnsupportedSchemaError(f"boolean exclusiveMaximum at {where} (draft 4)")
        bound = math.ceil(number("exclusiveMaximum")) - 1
        hi = bound if hi is None else min(hi, bound)
    return lo, hi


def _number_bounds(node: dict, where: str) -> tuple[int | None, int | None, bool, bool]:
    """(lo, hi, lo exclusive, hi exclusive) of a number, whole numbers: a fractional
    bound is tightened to the whole number inside it (``minimum: 1.1`` as 2; bounded
    numbers are written without an exponent: generation-time restrictions)."""
    def whole(key: str, lower: bool) -> tuple[int, bool]:
        value = node[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise (UnsupportedSchemaError if isinstance(value, bool) else ConstraintError)(
                f"{key} at {where} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConstraintError(f"{key} at {where} must be finite")
        if isinstance(value, float) and not value.is_integer():
            return (math.ceil(value) if lower else math.floor(value)), False
        return int(value), key.startswith("exclusive")

    lo = hi = None
    lo_open = hi_open = False
    for key in ("minimum", "exclusiveMinimum"):
        if key in node:
            value, is_open = whole(key, lower=True)
            if lo is None or value > lo or value == lo and is_open:
                lo, lo_open = value, is_open
    for key in ("maximum", "exclusiveMaximum"):
        if key in node:
            value, is_open = whole(key, lower=False)
            if hi is None or value < hi or value == hi and is_open:
                hi, hi_open = value, is_open
    return lo, hi, lo_open, hi_open


def _decimal_bounds(node: dict) -> tuple[Decimal | None, Decimal | None, bool, bool] | None:
    """(lo, hi, lo exclusive, hi exclusive) as the decimals the schema writes, where a
    bound has a fraction of at most MAX_BOUND_DIGITS digits; None otherwise (whole
    bounds, or ones :func:`_number_bounds` checks or tightens)."""
    values = {k: node[k] for k in NUMBER_BOUNDS if k in node}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in values.values()):
        return None
    exact = {k: Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
             for k, v in values.items()}
    digits = [-d.as_tuple().exponent for d in exact.values() if d != d.to_integral_value()]
    if not digits or max(digits) > MAX_BOUND_DIGITS:
        return None
    lo = hi = None
    lo_open = hi_open = False
    for key, value in exact.items():
        is_open = key.startswith("exclusive")
        if key.endswith("inimum") and (lo is None or value > lo or value == lo and is_open):
            lo, lo_open = value, is_open
        if key.endswith("aximum") and (hi is None or value < hi or value == hi and is_open):
            hi, hi_open = value, is_open
    return lo, hi, lo_open, hi_open


def _array_shape(node: dict, where: str) -> tuple[list[Any], Any]:
    """(schemas of the leading positions, schema of every later item)."""
    items = node.get("items", True)
    if "prefixItems" in node:
        prefix = node["prefixItems"]
        if not isinstance(prefix, list):
            raise ConstraintError(f"prefixItems at {where} must be an array")
        return prefix, items
    if isinstance(items, list):  # draft 7: items as a list, then additionalItems
        return items, node.get("additionalItems", True)
    return [], items
