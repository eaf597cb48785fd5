"""A constraint request, normalised: what to compile, before any vocabulary is involved.

``constraint_spec(grammar=..., regex=..., json_schema=..., choice=...)`` checks that
exactly one is given, resolves grammar files, turns JSON schemas and choice lists into
regexes, and raises :class:`ConstraintError` for anything invalid. It is quick and
synchronous, so a bad request is refused before it is queued.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specdec.structured.errors import ConstraintError
from specdec.structured.json_schema import schema_to_regex

OPTION_NAMES = ("grammar", "regex", "json_schema", "choice")


@dataclass(frozen=True)
class ConstraintSpec:
    kind: str  # "grammar" (Lark text) or "regex"
    source: str  # the Lark grammar text or the regex
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
                    whitespace_pattern: str | None = None) -> ConstraintSpec:
    given = {k: v for k, v in dict(grammar=grammar, regex=regex, json_schema=json_schema,
                                   choice=choice).items() if v is not None}
    if len(given) != 1:
        raise ConstraintError(
            f"give exactly one of {', '.join(OPTION_NAMES)}; got {sorted(given) or 'none'}"
        )
    if grammar is not None:
        return ConstraintSpec("grammar", grammar_text(grammar), _short(grammar))
    if regex is not None:
        if not isinstance(regex, str) or not regex:
            raise ConstraintError(f"regex must be a non-empty string, got {regex!r}")
        check_regex(regex)
        return ConstraintSpec("regex", regex, "regex")
    if json_schema is not None:
        return ConstraintSpec("regex", schema_to_regex(json_schema, whitespace_pattern),
                              "json_schema")
    return ConstraintSpec("regex", choice_regex(choice), "choice")


def grammar_text(grammar: str) -> str:
    """A grammar file name from ``grammars/`` (``"json.lark"`` or ``"json"``), a path, or text."""
    if not isinstance(grammar, str) or not grammar.strip():
        raise ConstraintError(f"grammar must be a non-empty string, got {grammar!r}")
    if "\n" not in grammar and ":" not in grammar:
        name = grammar if grammar.endswith(".lark") else grammar + ".lark"
        shipped = grammars_dir() / name
        if shipped.is_file():
            return shipped.read_text()
        path = Path(grammar).expanduser()
        if path.is_file():
            return path.read_text()
        raise ConstraintError(
            f"grammar {grammar!r} is neither a file in grammars/ "
            f"({', '.join(available_grammars())}), a path, nor Lark grammar text"
        )
    path = Path(grammar).expanduser() if "\n" not in grammar else None
    if path is not None and path.suffix == ".lark" and path.is_file():
        return path.read_text()
    return grammar


def check_regex(pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConstraintError(f"invalid regex {pattern!r}: {exc}") from None


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
    line = text.strip().splitlines()[0]
    return line if len(line) <= 60 else line[:57] + "..."
