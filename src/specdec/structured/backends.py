"""Structured-output backends: what turns a constraint into a :class:`Matcher`.

The structured plugin (:mod:`specdec.structured.plugin`) owns the request path (option
checks, the compile pool, the wait for validity, masks, speculation, forced drafts);
a backend owns only the two compile levels:

1. ``backend.spec(grammar=..., regex=..., json_schema=..., choice=...,
   whitespace_pattern=..., strict=...)``: the request options, normalised into a
   :class:`ConstraintSpec` (quick, on the calling thread; ``ConstraintError`` for bad
   input). ``spec.key`` is the cache key, so a backend puts in ``kind``/``source``
   whatever its compiler reads (the built-in: Lark text or a regex).
2. ``backend.compile(spec)`` (in the compile pool, never on the engine thread): an
   object whose ``.matcher()`` gives a fresh :class:`Matcher` per request. Every verb
   of :class:`Matcher` must work (``validate_tokens``, ``accept_token``, ``rollback``,
   ``copy``, ``allowed_mask``/``fill_bitmask`` in the packed layout of
   :mod:`~specdec.structured.bitmask`, ``is_accepting``, ``is_terminated``): speculation
   and forced drafts use them as they are.

Registering: a plugin adds its backend to the engine's registry in
``specdec_engine_started``::

    context.structured_backends.register("mine", MyBackend(context))

Selecting: ``LLM(structured_backend="mine")`` sets the engine's default (``"builtin"``
when unset); the request option ``structured_backend="mine"`` (the server: the body
field of that name) overrides it per request. An unknown name is a ``ValueError``
listing the registered ones.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

from specdec.structured.errors import ConstraintError
from specdec.structured.matcher import Matcher
from specdec.structured.spec import ConstraintSpec, constraint_spec

BUILTIN = "builtin"
OPTION = "structured_backend"  # the engine option and the request option


class CompiledForBackend(Protocol):
    """A compiled constraint: shared by the requests that use it, read-only."""

    def matcher(self) -> Matcher:
        """A new matcher at the start of the constraint."""


class StructuredBackend(ABC):
    """Compiles constraints for one engine's tokenizer (one instance per engine)."""

    def spec(self, *, grammar: str | None = None, regex: str | None = None,
             json_schema: Any = None, choice: list[str] | None = None,
             whitespace_pattern: str | None = None, strict: bool = False) -> ConstraintSpec:
        """The request options, normalised; exactly one constraint is given. Quick.

        The default is the built-in normalisation (JSON schemas become Lark text).
        """
        return constraint_spec(grammar=grammar, regex=regex, json_schema=json_schema,
                               choice=choice, whitespace_pattern=whitespace_pattern,
                               strict=strict)

    def cached(self, spec: ConstraintSpec) -> CompiledForBackend | None:
        """The compiled constraint if it is ready now (no work, no waiting), else None."""
        return None

    @abstractmethod
    def compile(self, spec: ConstraintSpec, on_valid: Callable[[], None] | None = None,
                timeout_s: float | None = None) -> CompiledForBackend:
        """Compile ``spec`` (a pool thread calls this); thread-safe.

        ``on_valid``: may be called once the constraint is known to compile, before the
        rest of the work (the caller stops waiting for validity then). ``timeout_s``: the
        caller gives up after it; a backend may stop earlier work on its own.
        Raise ``ConstraintError`` (a ``ValueError``) for a constraint it cannot compile.
        """


class BuiltinBackend(StructuredBackend):
    """specdec's own compiler (:mod:`specdec.structured.compile`): LALR + regex DFAs,
    caches in memory and on disk, table builds in capped child processes."""

    def __init__(self, vocab, isolated: bool):
        self.vocab = vocab  # TokenVocabulary
        self.isolated = isolated

    def cached(self, spec: ConstraintSpec) -> CompiledForBackend | None:
        from specdec.structured.compile import cached

        return cached(spec, self.vocab)

    def compile(self, spec: ConstraintSpec, on_valid: Callable[[], None] | None = None,
                timeout_s: float | None = None) -> CompiledForBackend:
        from specdec.structured.compile import compile_spec

        return compile_spec(spec, self.vocab, on_valid=on_valid, isolated=self.isolated,
                            timeout_s=timeout_s)


class StructuredBackends:
    """One engine's backends by name (``EngineContext.structured_backends``)."""

    def __init__(self) -> None:
        self._backends: dict[str, StructuredBackend] = {}

    def register(self, name: str, backend: StructuredBackend) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a structured backend needs a non-empty name, got {name!r}")
        if name in self._backends:
            raise ValueError(f"structured backend {name!r} is registered twice")
        self._backends[name] = backend

    def get(self, name: Any, option: str = OPTION) -> StructuredBackend:
        """The backend called ``name``; a ``ConstraintError`` naming ``option`` if none is."""
        backend = self._backends.get(name) if isinstance(name, str) else None
        if backend is None:
            raise ConstraintError(
                f"{option} must be one of {', '.join(self.names()) or '(none)'}, got {name!r:.60}"
            )
        return backend

    def names(self) -> list[str]:
        return sorted(self._backends)

    def __contains__(self, name: object) -> bool:
        return name in self._backends
