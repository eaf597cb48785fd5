"""``compile_constraint``: once per (constraint, vocabulary), in memory and on disk.

Disk cache (under ``specdec.model.loader.cache_root() / "structured"``): the LALR
tables and terminal DFAs of a grammar (keyed by the grammar text), its compile-time
vocabulary walks (keyed by the terminal DFAs and vocabulary fingerprint, see
:mod:`specdec.structured.cfg.prewalk`) and the outlines-core index of a regex (keyed by
regex and vocabulary fingerprint). Entries are written atomically; an unreadable entry
is rebuilt.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import threading
from pathlib import Path
from typing import Any

from specdec.structured.cfg.grammar import CompiledGrammar, GrammarTables
from specdec.structured.cfg.prewalk import terminals_fingerprint
from specdec.structured.regex_backend import CompiledRegex, build_index
from specdec.structured.spec import ConstraintSpec, constraint_spec
from specdec.structured.vocabulary import TokenVocabulary, token_vocabulary


def _code_version() -> str:
    """Cache entries are pickles of our classes: key them by this package's source."""
    import hashlib

    h = hashlib.blake2b(digest_size=6)
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()


CACHE_VERSION = _code_version()
CompiledConstraint = CompiledGrammar | CompiledRegex

_memory: dict[tuple[str, str], CompiledConstraint] = {}
_locks: dict[tuple[str, str], threading.Lock] = {}
_guard = threading.Lock()


def compile_constraint(tokenizer, *, grammar: str | None = None, regex: str | None = None,
                       json_schema: Any = None, choice: list[str] | None = None,
                       whitespace_pattern: str | None = None, vocab_size: int | None = None,
                       eos_token_ids: frozenset[int] | None = None) -> CompiledConstraint:
    """Compile one constraint for ``tokenizer``; ``.matcher()`` on the result starts a request.

    Exactly one of ``grammar`` (a file in grammars/, a path or Lark text), ``regex``,
    ``json_schema`` (dict, JSON string or pydantic model) and ``choice`` must be given.
    Raises :class:`~specdec.structured.errors.ConstraintError` on invalid input.
    """
    spec = constraint_spec(grammar=grammar, regex=regex, json_schema=json_schema,
                           choice=choice, whitespace_pattern=whitespace_pattern,
                           allow_paths=True)
    return compile_spec(spec, token_vocabulary(tokenizer, vocab_size, eos_token_ids))


def compile_spec(spec: ConstraintSpec, vocab: TokenVocabulary,
                 use_disk_cache: bool = True) -> CompiledConstraint:
    key = (spec.key, vocab.fingerprint)
    with _guard:
        if key in _memory:
            return _memory[key]
        lock = _locks.setdefault(key, threading.Lock())
    with lock:  # two requests for the same new grammar compile it once
        if key not in _memory:
            _memory[key] = _build(spec, vocab, use_disk_cache)
    return _memory[key]


def grammar_tables(text: str, use_disk_cache: bool = True) -> GrammarTables:
    """The vocabulary-independent part of a grammar (also the synchronous validation)."""
    from specdec.structured.spec import ConstraintSpec, grammars_dir

    path = _cache_path(ConstraintSpec("grammar", text, "").key, "tables")
    tables = _load(path) if use_disk_cache else None
    if tables is None:
        tables = GrammarTables(text, import_paths=[str(grammars_dir())])
        if use_disk_cache:
            _store(path, tables)
    return tables


def _build(spec: ConstraintSpec, vocab: TokenVocabulary, use_disk_cache: bool):
    if spec.kind == "grammar":
        tables = grammar_tables(spec.source, use_disk_cache)
        path = _cache_path(f"{terminals_fingerprint(tables.terminals)}-{vocab.fingerprint}",
                           "walks")
        walks = _load(path) if use_disk_cache else None
        compiled = CompiledGrammar(tables, vocab, walks)
        if walks is None:
            walks = compiled.prewalk()
            if use_disk_cache:
                _store(path, walks)
        compiled.mask_for(compiled.initial_state)  # warm the first step
        return compiled
    path = _cache_path(f"{spec.key}-{vocab.fingerprint}", "index")
    index = _load(path) if use_disk_cache else None
    if index is None:
        index = build_index(spec.source, vocab)
        if use_disk_cache:
            _store(path, index)
    return CompiledRegex(spec.source, vocab, index)


def _cache_path(key: str, kind: str) -> Path:
    from specdec.model.loader import cache_root

    return cache_root() / "structured" / f"v{CACHE_VERSION}-{kind}-{key}.pkl"


def _load(path: Path):
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:  # noqa: BLE001 - missing or stale entry: rebuild
        return None


def _store(path: Path, value) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs compile time
