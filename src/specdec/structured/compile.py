"""``compile_constraint``: once per (constraint, vocabulary), in memory and on disk.

Disk cache (under ``specdec.paths.structured_dir()``): the LALR
tables and terminal DFAs of a grammar (keyed by the grammar text, or a JSON schema's
source: a hit skips the schema's translation too), its compile-time
vocabulary walks (keyed by the terminal DFAs and vocabulary fingerprint, see
:mod:`specdec.structured.cfg.prewalk`) and the outlines-core index of a regex (keyed by
regex and vocabulary fingerprint). Entries are written atomically; an unreadable entry
is rebuilt.

Both caches are LRU, bounded by bytes (:mod:`~specdec.structured.compile_cache`): the
memory one by the size of each constraint's compiled artifacts (``SPECDEC_CONSTRAINT_
CACHE_MEMORY_MIB``, default 256), the disk one by its files (``SPECDEC_CONSTRAINT_CACHE_
DISK_MIB``, default 1024); :func:`configure_caches` changes them at run time. Masks a
compiled constraint caches while serving are bounded by the constraint itself.
"""

from __future__ import annotations

import functools
import os
import pickle
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specdec.paths import structured_dir
from specdec.structured.cfg.byte_dfa import regex_to_byte_dfa
from specdec.structured.cfg.grammar import CompiledGrammar, GrammarTables, pattern_dfa
from specdec.structured.cfg.walk_store import SHARED as SHARED_WALKS
from specdec.structured.compile_cache import DiskCache, MemoryCache, MiB, dumps
from specdec.structured.compile_worker import ISOLATION, ProcessCompiler
from specdec.structured.errors import ConstraintError, UnsupportedSchemaError
from specdec.structured.regex_backend import CompiledRegex, build_index
from specdec.structured.spec import ConstraintSpec, constraint_spec, lark_text
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

_memory = MemoryCache(int(os.environ.get("SPECDEC_CONSTRAINT_CACHE_MEMORY_MIB", "256")) * MiB)
_disk = DiskCache(int(os.environ.get("SPECDEC_CONSTRAINT_CACHE_DISK_MIB", "1024")) * MiB)
_locks: dict[tuple[str, str], threading.Lock] = {}  # keys being compiled now
_guard = threading.Lock()
_compiler = ProcessCompiler()  # isolated compiles: a pool of capped worker processes
# The most an isolated compile may send back: the engine process holds what it receives.
_max_artifact_bytes = int(os.environ.get("SPECDEC_CONSTRAINT_MAX_MIB", "256")) * MiB
_warmed: set[str] = set()  # vocabularies whose common walks this process has done
# Whose dear walks every process does once: the strings nearly every schema has (values,
# property names), not the formats' many states.
_COMMON_WALKS_SCHEMA = {"type": "object", "properties": {
    "string": {"type": "string"}, "any": {}, "object": {"type": "object"}}}


def configure_caches(memory_bytes: int | None = None, disk_bytes: int | None = None) -> None:
    """Set the byte budgets of the compiled-constraint caches (this process)."""
    if memory_bytes is not None:
        _memory.resize(memory_bytes)
    if disk_bytes is not None:
        _disk.max_bytes = disk_bytes
        _disk.evict(structured_dir())


def clear_caches(memory: bool = True, disk: bool = True, shared: bool = False) -> None:
    """Forget compiled constraints: the in-memory LRU and/or the disk cache's folder;
    ``shared``: also what grammars share in this process (terminal DFAs, the walks of
    :mod:`~specdec.structured.cfg.walk_store`), for a compile as cold as a new process's."""
    if memory:
        _memory.clear()
    if disk:
        shutil.rmtree(structured_dir(), ignore_errors=True)
    if shared:
        regex_to_byte_dfa.cache_clear()
        pattern_dfa.cache_clear()
        SHARED_WALKS.clear()
        _warmed.clear()


def warm_common_walks(vocab: TokenVocabulary) -> None:
    """Walk the dear states of the strings nearly every JSON schema has (values, property
    names: :data:`_COMMON_WALKS_SCHEMA`) into the process-wide walk store, once per
    vocabulary and process (~12 whole-vocabulary walks), so a schema's compile walks only
    terminals of its own (patterns, formats, bounded strings). Done before the first JSON
    schema's compile, and at engine start by the plugin."""
    if vocab.fingerprint in _warmed:
        return
    _warmed.add(vocab.fingerprint)
    from specdec.structured.json_schema import schema_to_lark

    tables = grammar_tables(schema_to_lark(_COMMON_WALKS_SCHEMA), use_disk_cache=False)
    CompiledGrammar(tables, vocab).warm_shared_walks()


def configure_isolation(max_workers: int | None = None, memory_bytes: int | None = None,
                        max_artifact_bytes: int | None = None) -> None:
    """Set how many compile workers may run at once, each job's memory cap and the most
    bytes of compiled tables a job may send back (larger: refused as too complex)."""
    global _compiler, _max_artifact_bytes
    if max_artifact_bytes is not None:
        _max_artifact_bytes = max_artifact_bytes
    if max_workers is None and memory_bytes is None:
        return
    _compiler.shutdown()
    _compiler = ProcessCompiler(max_workers or _compiler.max_workers,
                                memory_bytes or _compiler.memory_bytes)


def start_isolation() -> None:
    """Start the compile workers now, so the first isolated compile finds one warm."""
    _compiler.start()


def isolation_ready(timeout_s: float | None = None) -> bool:
    """Wait until a first compile worker has answered (True at once without isolation);
    False if none has within ``timeout_s``."""
    return not ISOLATION or _compiler.ready.wait(timeout_s)


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


def cached(spec: ConstraintSpec, vocab: TokenVocabulary) -> CompiledConstraint | None:
    """The compiled constraint if it is in memory now (no work, no waiting), else None."""
    return _memory.get((spec.key, vocab.fingerprint))


def compile_spec(spec: ConstraintSpec, vocab: TokenVocabulary, use_disk_cache: bool = True,
                 on_valid: Callable[[], None] | None = None, isolated: bool = False,
                 timeout_s: float | None = None) -> CompiledConstraint:
    """Compile (or find) ``spec`` for ``vocab``; thread-safe, one build per key at a time.

    ``on_valid``: called once the constraint is known to compile (a grammar's tables
    are built; a regex is done), before the rest of the work. It is not called on error.
    ``isolated``: build what the caches lack in a capped worker process (see
    :mod:`~specdec.structured.compile_worker`), killed after ``timeout_s``; the caches
    and the assembled constraint stay in this process. A cache hit sends no job.
    """
    key = (spec.key, vocab.fingerprint)
    with _guard:
        compiled = _memory.get(key)
        if compiled is not None:
            return compiled
        lock = _locks.setdefault(key, threading.Lock())
    with lock:  # two requests for the same new grammar compile it once
        compiled = _memory.get(key)
        if compiled is None:
            if isolated:
                compiled, nbytes = _build_isolated(spec, vocab, use_disk_cache, on_valid,
                                                   timeout_s)
            else:
                compiled, nbytes = _build(spec, vocab, use_disk_cache, on_valid)
            _memory.put(key, compiled, nbytes)
    with _guard:
        _locks.pop(key, None)
    return compiled


def grammar_tables(text: str, use_disk_cache: bool = True) -> GrammarTables:
    """The vocabulary-independent part of a grammar (parse, LALR tables, terminal DFAs)."""
    return _spec_tables(ConstraintSpec("grammar", text, ""), use_disk_cache)[0]


def _spec_tables(spec: ConstraintSpec, use_disk_cache: bool) -> tuple[GrammarTables, int]:
    """The tables of a ``grammar`` or ``json_schema`` spec, with their size."""
    if not use_disk_cache:  # the size for the memory budget, without pickling
        tables = _build_tables(spec)
        return tables, _approximate_bytes(tables)
    return _cached_artifact(_tables_path(spec), use_disk_cache, lambda: _build_tables(spec))


def _build_tables(spec: ConstraintSpec) -> GrammarTables:
    try:
        return GrammarTables(lark_text(spec), import_paths=_import_paths())
    except ConstraintError as exc:
        if spec.kind != "json_schema" or "collision" not in str(exc).lower():
            raise
        # The schema's own grammar is not LALR(1): alternatives that overlap, which the
        # schema compiler could not merge. A schema problem, named as one.
        raise UnsupportedSchemaError(
            "json_schema is not supported: alternatives (anyOf, oneOf or a type list) "
            "overlap in a way the parser cannot follow") from None


@functools.cache
def _import_paths() -> list[str]:
    """Where ``%import`` finds grammars (specdec's own); the list is never changed."""
    from specdec.structured.spec import grammars_dir

    return [str(grammars_dir())]


def _approximate_bytes(tables: GrammarTables) -> int:
    """About what ``tables`` pickles to: its DFAs' arrays and ~50 bytes an LALR entry."""
    dfas = sum(t.dfa.table.nbytes + t.dfa.accepting.nbytes for t in tables.terminals)
    lalr = tables.lalr
    entries = sum(map(len, lalr.actions.values())) + sum(map(len, lalr.gotos.values()))
    return dfas + 50 * entries


def _build(spec: ConstraintSpec, vocab: TokenVocabulary, use_disk_cache: bool,
           on_valid: Callable[[], None] | None) -> tuple[CompiledConstraint, int]:
    """The compiled constraint and its size: the bytes of the artifacts it was built from."""
    if spec.kind != "regex":
        tables, tables_bytes = _spec_tables(spec, use_disk_cache)
        if on_valid is not None:
            on_valid()
        path = _walks_path(tables, vocab) if use_disk_cache else None
        loaded = _disk.load(path) if use_disk_cache else None
        if spec.origin == "json_schema":
            warm_common_walks(vocab)
        compiled = CompiledGrammar(tables, vocab, loaded[0] if loaded else None)
        if loaded is None:
            data = dumps(compiled.prewalk())
            if use_disk_cache:
                _disk.store(path, data)
            loaded = (None, len(data))
        compiled.warm_up()  # here, not in the first masks on the engine thread
        return compiled, tables_bytes + loaded[1]
    path = _cache_path(f"{spec.key}-{vocab.fingerprint}", "index")
    index, nbytes = _cached_artifact(path, use_disk_cache,
                                     lambda: build_index(spec.source, vocab))
    return CompiledRegex(spec.source, vocab, index), nbytes


def _build_isolated(spec: ConstraintSpec, vocab: TokenVocabulary, use_disk_cache: bool,
                    on_valid: Callable[[], None] | None,
                    timeout_s: float | None) -> tuple[CompiledConstraint, int]:
    """``_build``, with every artifact the disk cache lacks built in a worker process."""
    progress = (lambda _: on_valid()) if on_valid is not None else None
    if spec.kind != "regex":
        tables_path = _tables_path(spec)
        tables = _disk.load(tables_path) if use_disk_cache else None
        walks = None
        if tables is not None:
            walks_path = _walks_path(tables[0], vocab)
            walks = _disk.load(walks_path) if use_disk_cache else None
        if tables is None or walks is None:
            vocab.byte_trie  # noqa: B018 - sent built, once per worker: rebuilding costs ~120 ms
            tables_data, walks_data = _compiler.run(
                _grammar_artifacts, (spec, vocab, _max_artifact_bytes), spec.origin,
                timeout_s, progress)
            tables = pickle.loads(tables_data), len(tables_data)
            walks = pickle.loads(walks_data), len(walks_data)
            if use_disk_cache:
                _disk.store(tables_path, tables_data)
                _disk.store(_walks_path(tables[0], vocab), walks_data)
        elif on_valid is not None:
            on_valid()
        if spec.origin == "json_schema":
            warm_common_walks(vocab)
        compiled = CompiledGrammar(tables[0], vocab, walks[0])
        compiled.warm_up()  # here, not in the first masks on the engine thread
        return compiled, tables[1] + walks[1]
    path = _cache_path(f"{spec.key}-{vocab.fingerprint}", "index")
    loaded = _disk.load(path) if use_disk_cache else None
    if loaded is None:
        data = _compiler.run(_regex_index, (spec.source, vocab, _max_artifact_bytes), spec.origin,
                             timeout_s, progress)
        if use_disk_cache:
            _disk.store(path, data)
        loaded = pickle.loads(data), len(data)
    return CompiledRegex(spec.source, vocab, loaded[0]), loaded[1]


def _grammar_artifacts(spec: ConstraintSpec, vocab: TokenVocabulary, max_bytes: int,
                       send) -> tuple[bytes, bytes]:
    """In the worker: a grammar's or JSON schema's tables and compile-time walks, pickled
    (a schema's translation to Lark runs here too: some schemas make it slow)."""
    tables = _build_tables(spec)
    send("valid")
    tables_data = _bounded(dumps(tables), max_bytes, spec.origin)
    walks_data = dumps(CompiledGrammar(tables, vocab).prewalk())
    return tables_data, _bounded(walks_data, max_bytes - len(tables_data), spec.origin)


def _regex_index(pattern: str, vocab: TokenVocabulary, max_bytes: int, send) -> bytes:
    """In the worker: a regex's outlines-core index, pickled."""
    return _bounded(dumps(build_index(pattern, vocab)), max_bytes, "regex")


def _bounded(data: bytes, max_bytes: int, what: str) -> bytes:
    """``data``, unless it is past ``max_bytes``: what the engine process would hold."""
    if len(data) > max_bytes:
        raise ConstraintError(f"grammar too complex: compiling {what} built more than "
                              f"{max_bytes / 2**20:g} MiB of tables")
    return data


def _tables_path(spec: ConstraintSpec) -> Path:
    return _cache_path(spec.key, "tables")  # a grammar's key: its text's (origin aside)


def _walks_path(tables: GrammarTables, vocab: TokenVocabulary) -> Path:
    return _cache_path(f"{tables.terminals_fingerprint()}-{vocab.fingerprint}", "walks")


def _cached_artifact(path: Path, use_disk_cache: bool, build) -> tuple[Any, int]:
    """``build()``'s result, from the disk cache when there; with its pickled size."""
    loaded = _disk.load(path) if use_disk_cache else None
    if loaded is not None:
        return loaded
    value = build()
    data = dumps(value)
    if use_disk_cache:
        _disk.store(path, data)
    return value, len(data)


def _cache_path(key: str, kind: str) -> Path:
    return structured_dir() / f"v{CACHE_VERSION}-{kind}-{key}.pkl"
