"""The llguidance backend: request options -> llguidance grammars -> ``LLMatcher``.

``spec()`` (on the calling thread, quick) turns the options into llguidance's own
grammar text: JSON schemas go to llguidance's JSON compiler (not to specdec's Lark
translation), regexes and choice lists to its regex front end, Lark grammars (text or
a shipped grammar's name) to its Lark front end. ``compile()`` (in the structured
plugin's compile pool, in this process) builds an ``LLMatcher``; its initial state is
cached per spec key (LRU) and every request starts from a ``deep_copy`` of it.

Same meaning as the built-in backend: compact JSON unless ``whitespace_pattern`` is
given; objects that list ``properties`` take only those unless the schema says
``additionalProperties``, and ``strict`` closes every object.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import llguidance
import llguidance.hf

from specdec.structured.backends import StructuredBackend
from specdec.structured.errors import ConstraintError
from specdec.structured.json_schema import schema_to_dict
from specdec.structured.spec import (
    OPTION_NAMES,
    ConstraintSpec,
    choice_regex,
    grammar_text,
    shipped_grammar,
)
from specdec_llguidance.matcher import LLGuidanceMatcher, fresh_mask

KIND = "llguidance"  # ConstraintSpec.kind: source is an llguidance grammar (JSON text)
MAX_CACHED = 64  # compiled grammars kept per engine (an LLMatcher each)
# Keys whose values are maps of name -> schema (not schemas themselves).
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LITERALS = ("enum", "const", "default", "examples", "required")  # values, never schemas


class CompiledLLGuidance:
    """A grammar built for one tokenizer; read-only, shared by the requests using it."""

    def __init__(self, template: llguidance.LLMatcher, vocab_size: int,
                 eos_token_ids: frozenset[int]):
        self.template = template  # at the start of the grammar; only ever deep-copied
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids

    def matcher(self) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(self.template.deep_copy(), self)


class LLGuidanceBackend(StructuredBackend):
    """One engine's llguidance compiler; the tokenizer tables are built on first use."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: frozenset[int]):
        self.hf_tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self._lltokenizer: llguidance.LLTokenizer | None = None
        self._tokenizer_error: str | None = None
        self._tokenizer_lock = threading.Lock()
        self._cache: OrderedDict[str, CompiledLLGuidance] = OrderedDict()
        self._cache_lock = threading.Lock()

    # ----------------------------------------------------------------- spec

    def spec(self, *, grammar: str | None = None, regex: str | None = None,
             json_schema: Any = None, choice: list[str] | None = None,
             whitespace_pattern: str | None = None, strict: bool = False) -> ConstraintSpec:
        given = {k: v for k, v in dict(grammar=grammar, regex=regex, json_schema=json_schema,
                                       choice=choice).items() if v is not None}
        if len(given) != 1:
            raise ConstraintError(
                f"give exactly one of {', '.join(OPTION_NAMES)}; got {sorted(given) or 'none'}"
            )
        if whitespace_pattern is not None and json_schema is None:
            raise ConstraintError("whitespace_pattern needs json_schema")
        Grammar = llguidance.LLMatcher
        if json_schema is not None:
            return ConstraintSpec(KIND, _json_grammar(json_schema, whitespace_pattern, strict),
                                  "json_schema")
        if regex is not None:
            if not isinstance(regex, str) or not regex:
                raise ConstraintError(f"regex must be a non-empty string, got {regex!r:.60}")
            return ConstraintSpec(KIND, Grammar.grammar_from_regex(regex), "regex")
        if choice is not None:
            return ConstraintSpec(KIND, Grammar.grammar_from_regex(choice_regex(choice)), "choice")
        text = grammar_text(grammar)  # a shipped grammar's name or Lark text; no paths
        origin = grammar if shipped_grammar(grammar) is not None else "grammar"
        return ConstraintSpec(KIND, Grammar.grammar_from_lark(text), origin)

    # -------------------------------------------------------------- compile

    def cached(self, spec: ConstraintSpec) -> CompiledLLGuidance | None:
        with self._cache_lock:
            compiled = self._cache.get(spec.key)
            if compiled is not None:
                self._cache.move_to_end(spec.key)
            return compiled

    def compile(self, spec: ConstraintSpec, on_valid: Callable[[], None] | None = None,
                timeout_s: float | None = None) -> CompiledLLGuidance:
        if spec.kind != KIND:
            raise ConstraintError(f"the llguidance backend cannot compile a {spec.kind!r} spec")
        compiled = self.cached(spec)
        if compiled is not None:
            return compiled
        if self._lltokenizer is None:  # its first build takes seconds: check the grammar first
            is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(spec.source)
            if is_error:
                raise ConstraintError(f"llguidance cannot compile {spec.origin}: {messages[0]}")
            if on_valid is not None:
                on_valid()  # a request waiting for validity is queued now, blocked
        template = llguidance.LLMatcher(self.lltokenizer(), spec.source, log_level=0)
        if not template.is_error():
            fresh_mask(template, self.vocab_size)  # the first mask: some errors show only here
        if template.is_error():
            raise ConstraintError(f"llguidance cannot compile {spec.origin}: "
                                  f"{template.get_error()}")
        compiled = CompiledLLGuidance(template, self.vocab_size, self.eos_token_ids)
        with self._cache_lock:
            self._cache[spec.key] = compiled
            while len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)
        return compiled

    # ------------------------------------------------------------ tokenizer

    def lltokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's tables of the engine's tokenizer (~0.4 s for a 49k vocabulary)."""
        with self._tokenizer_lock:
            if self._lltokenizer is None and self._tokenizer_error is None:
                try:
                    self._lltokenizer = llguidance.hf.from_tokenizer(
                        self.hf_tokenizer, n_vocab=self.vocab_size,
                        eos_token=sorted(self.eos_token_ids) or None)
                except Exception as exc:  # noqa: BLE001 - every request gets the reason
                    self._tokenizer_error = f"{type(exc).__name__}: {exc}"
            if self._lltokenizer is None:
                raise ConstraintError("the llguidance backend cannot use this model's "
                                      f"tokenizer: {self._tokenizer_error}")
            return self._lltokenizer

    def warm_up(self) -> None:
        """Build the tokenizer tables in a background thread now."""
        def build() -> None:
            try:
                self.lltokenizer()
            except ConstraintError:
                pass  # kept; the first request reports it

        threading.Thread(target=build, name="llguidance-tokenizer", daemon=True).start()


def _json_grammar(schema: Any, whitespace_pattern: str | None, strict: bool) -> str:
    if isinstance(schema, bool):
        raise ConstraintError("json_schema must be a JSON object, got a boolean")
    schema = _restrict_objects(schema_to_dict(schema), "closed" if strict else "listed")
    if whitespace_pattern is None:
        options: dict[str, Any] = {"whitespace_flexible": False}
    elif isinstance(whitespace_pattern, str):
        options = {"whitespace_flexible": True, "whitespace_pattern": whitespace_pattern}
    else:
        raise ConstraintError(f"whitespace_pattern must be a string, got "
                              f"{whitespace_pattern!r:.40}")
    try:
        return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=options)
    except (ValueError, TypeError) as exc:
        raise ConstraintError(f"json_schema: {exc}") from None


def _restrict_objects(node: Any, mode: str) -> Any:
    """The built-in's object rule: ``listed`` closes objects that list ``properties``,
    ``closed`` every object, unless the schema gives ``additionalProperties``."""
    if isinstance(node, list):
        return [_restrict_objects(item, mode) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _restrict_objects(sub, mode) for name, sub in value.items()}
        elif key in _LITERALS:
            out[key] = value
        else:
            out[key] = _restrict_objects(value, mode)
    is_object = "properties" in node or (mode == "closed" and node.get("type") == "object")
    open_keys = ("additionalProperties", "patternProperties", "unevaluatedProperties")
    if is_object and not any(k in node for k in open_keys):
        out["additionalProperties"] = False
    return out
