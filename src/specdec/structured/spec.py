"""A constraint request, normalised: what to compile, before any vocabulary is involved.

``constraint_spec(grammar=..., regex=..., json_schema=..., choice=...)`` checks that
exactly one is given, resolves grammar names, turns choice lists into regexes and JSON
schemas into canonical JSON (the schema with its options: ``whitespace_pattern``,
``strict`` for closed objects), and raises :class:`ConstraintError` for what it can see
is invalid. It is quick and synchronous (proportional to the input), so it may run on the
engine thread and in the server's event loop: nothing here can take long on any input.
A schema's translation to a Lark grammar (:func:`schema_grammar`, ``json_schema.py``),
which some schemas make slow, is compile work: it runs with the rest of the compile, in a
capped worker process, and its refusals arrive as compile errors.

A grammar is Lark text or the name of a shipped grammar (``"json"``, ``"json.lark"``).
File paths are read only with ``allow_paths=True`` (the offline API and the CLI): the
engine and the server never pass it, so no client can make the server read a file, and
no error message quotes a file or tells whether it exists.
"""

from __future__ import annotations

import hashlib
import json
import re
import re._constants as _constants  # the stdlib regex parser: syntax tree, no matching
import re._parser as _regex_parser
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specdec.structured.errors import ConstraintError
from specdec.structured.json_schema import schema_to_dict, schema_to_lark

OPTION_NAMES = ("grammar", "regex", "json_schema", "choice")
SHIPPED_NAME = re.compile(r"[A-Za-z0-9_-]+(\.lark)?")
# A relative %import makes lark open "<cwd or script dir>/<name>.lark": a file read.
RELATIVE_IMPORT = re.compile(r"^\s*%import\s+\.", re.MULTILINE)


@dataclass(frozen=True)
class ConstraintSpec:
    kind: str  # "grammar" (Lark text), "json_schema" (see schema_source) or "regex"
    source: str  # the Lark grammar text, the schema with its options, or the regex
    origin: str  # what the user asked for, for messages ("json.lark", "json_schema")

    @property
    def key(self) -> str:
        return hashlib.blake2b(f"{self.kind}\0{self.source}".encode(), digest_size=16).hexdigest()


def grammars_dir() -> Path:
    """The grammars shipped with specdec (``grammars/`` at the repo root links here)."""
    return Path(str(resources.files("specdec") / "grammars"))


def available_grammars() -> list[str]:
    return sorted(p.name for p in grammars_dir().glob("*.lark"))


def constraint_spec(*, grammar: str | None = None, regex: str | None = None,
                    json_schema: Any = None, choice: list[str] | None = None,
                    whitespace_pattern: str | None = None,
                    allow_paths: bool = False, strict: bool = False) -> ConstraintSpec:
    given = {k: v for k, v in dict(grammar=grammar, regex=regex, json_schema=json_schema,
                                   choice=choice).items() if v is not None}
    if len(given) != 1:
        raise ConstraintError(
            f"give exactly one of {', '.join(OPTION_NAMES)}; got {sorted(given) or 'none'}"
        )
    if grammar is not None:
        return ConstraintSpec("grammar", grammar_text(grammar, allow_paths), _short(grammar))
    if regex is not None:
        check_regex(regex)
        return ConstraintSpec("regex", regex, "regex")
    if json_schema is not None:
        if whitespace_pattern is not None:
            check_regex(whitespace_pattern, "whitespace_pattern")
        return ConstraintSpec("json_schema", schema_source(json_schema, whitespace_pattern,
                                                           strict), "json_schema")
    return ConstraintSpec("regex", choice_regex(choice), "choice")


def schema_source(schema: Any, whitespace_pattern: str | None = None,
                  strict: bool = False) -> str:
    """A JSON schema with its options as one canonical JSON text (a constraint's source
    and cache key; :func:`schema_grammar` reads it). Keys keep their written order: it is
    the order properties are generated in."""
    if not isinstance(schema, bool):
        schema = schema_to_dict(schema)
    try:
        return json.dumps({"schema": schema, "whitespace": whitespace_pattern,
                           "strict": strict}, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ConstraintError(f"json_schema is not JSON data: {exc}") from None
    except RecursionError:
        raise ConstraintError("json_schema is nested too deeply") from None


def schema_grammar(source: str) -> str:
    """The Lark grammar of a ``json_schema`` spec's source: the compile's first step,
    which may be slow or refuse the schema (:class:`UnsupportedSchemaError`)."""
    options = json.loads(source)
    return schema_to_lark(options["schema"], options["whitespace"], options["strict"])


def lark_text(spec: ConstraintSpec) -> str:
    """The Lark grammar a ``grammar`` or ``json_schema`` spec compiles."""
    return schema_grammar(spec.source) if spec.kind == "json_schema" else spec.source


def grammar_text(grammar: str, allow_paths: bool = False) -> str:
    """Lark text for a shipped grammar's name (``"json.lark"`` or ``"json"``) or for text.

    ``allow_paths``: a one-line string naming an existing file is read too (offline use
    only; never for a grammar that came from a client).
    """
    if not isinstance(grammar, str) or not grammar.strip():
        raise ConstraintError(f"grammar must be a non-empty string, got {grammar!r:.60}")
    shipped = shipped_grammar(grammar)
    if shipped is not None:
        return shipped
    one_line = "\n" not in grammar
    if allow_paths and one_line:
        path = Path(grammar).expanduser()
        if path.is_file():
            return path.read_text()
    if one_line and ":" not in grammar:  # every Lark rule has a ':'
        where = ", a path," if allow_paths else ""
        raise ConstraintError(
            f"grammar {_short(grammar)!r} is neither a file in grammars/ "
            f"({', '.join(available_grammars())}){where} nor Lark grammar text"
        )
    if not allow_paths and RELATIVE_IMPORT.search(grammar):
        raise ConstraintError("grammar: relative %import is not allowed; import from lark's "
                              "library (%import common.X) or a shipped grammar")
    return grammar


def read_grammar_path(grammar: Any) -> Any:
    """Offline API and CLI only: a path to a grammar file becomes its text; else unchanged."""
    if not isinstance(grammar, str) or "\n" in grammar or not grammar.strip():
        return grammar
    if shipped_grammar(grammar) is not None:
        return grammar  # keep the name: messages say "compiling json.lark"
    path = Path(grammar).expanduser()
    return path.read_text() if path.is_file() else grammar


def shipped_grammar(name: str) -> str | None:
    """The text of ``grammars/<name>`` (``.lark`` optional), or None if it is not one."""
    if not SHIPPED_NAME.fullmatch(name):
        return None
    path = grammars_dir() / (name if name.endswith(".lark") else name + ".lark")
    return path.read_text() if path.is_file() else None


def check_regex(pattern: str, field: str = "regex") -> None:
    """Refuse, with a short message naming ``field``, a regex the DFA compiler cannot take:
    bad syntax, lookaround, backreferences, anchors and ``\\b``, or one that matches nothing.
    (The compile itself runs later, in the background: its errors would arrive too late.)
    """
    if not isinstance(pattern, str) or not pattern:
        raise ConstraintError(f"{field} must be a non-empty string, got {pattern!r:.60}")
    try:
        tree = _regex_parser.parse(pattern)
    except re.error as exc:
        raise ConstraintError(f"invalid {field} {pattern!r:.80}: {exc}") from None
    unsupported = _unsupported_regex_feature(tree)
    if unsupported:
        raise ConstraintError(f"{field} {pattern!r:.80} uses {unsupported}, which constrained "
                              "decoding does not support")
    if _matches_nothing(pattern, tree):
        raise ConstraintError(f"{field} {pattern!r:.80} matches no string")


_UNSUPPORTED = {
    _constants.ASSERT: "lookahead or lookbehind", _constants.ASSERT_NOT: "lookahead or lookbehind",
    _constants.GROUPREF: "a backreference", _constants.GROUPREF_EXISTS: "a conditional group",
    _constants.AT: r"an anchor or word boundary (^, $, \A, \Z, \b, \B)",
}
_MAX_EMPTINESS_CHECK = 64  # largest repeat bound for which the emptiness check runs


def _unsupported_regex_feature(tree) -> str | None:
    for op, arg in tree:
        if op in _UNSUPPORTED:
            return _UNSUPPORTED[op]
        for sub in _subpatterns(op, arg):
            found = _unsupported_regex_feature(sub)
            if found:
                return found
    return None


def _subpatterns(op, arg) -> list:
    if op in (_constants.MAX_REPEAT, _constants.MIN_REPEAT, _constants.POSSESSIVE_REPEAT):
        return [arg[2]]
    if op is _constants.SUBPATTERN:
        return [arg[3]]
    if op is _constants.ATOMIC_GROUP:
        return [arg]
    if op is _constants.BRANCH:
        return list(arg[1])
    return []


def _largest_repeat(tree) -> int:
    largest = 0
    for op, arg in tree:
        if op in (_constants.MAX_REPEAT, _constants.MIN_REPEAT, _constants.POSSESSIVE_REPEAT):
            bound = arg[0] if arg[1] is _constants.MAXREPEAT else arg[1]
            largest = max(largest, bound)
        for sub in _subpatterns(op, arg):
            largest = max(largest, _largest_repeat(sub))
    return largest


def _matches_nothing(pattern: str, tree) -> bool:
    """True if the regex's language is empty (``[^\\s\\S]``); checked only for small
    regexes, since interegular expands bounded repeats; False when unsure."""
    if len(pattern) > 1000 or _largest_repeat(tree) > _MAX_EMPTINESS_CHECK:
        return False
    try:
        import interegular

        return interegular.parse_pattern(pattern).to_fsm().empty()
    except Exception:  # noqa: BLE001 - interegular lacks some syntax: leave it to the compiler
        return False


def choice_regex(choices: Any) -> str:
    if isinstance(choices, str) or not isinstance(choices, (list, tuple)) or not choices:
        raise ConstraintError(f"choice must be a non-empty list of strings, got {choices!r}")
    bad = [c for c in choices if not isinstance(c, str) or not c]
    if bad:
        raise ConstraintError(f"choice entries must be non-empty strings, got {bad!r}")
    # Longest first: outlines-core's DFA is leftmost-first, so "a|ab" would never reach "ab".
    ordered = sorted(dict.fromkeys(choices), key=len, reverse=True)
    return "(" + "|".join(re.escape(c) for c in ordered) + ")"


def _short(text: str) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= 60 else line[:57] + "..."
