"""The built-in engine plugin: grammar masks through the ordinary hooks, nothing special.

Per request (options in ``SamplingParams.extra``: ``grammar``, ``regex``,
``json_schema``, ``choice``, plus ``whitespace_pattern`` for schemas and
``structured_backend`` to pick the compiler, see :mod:`~specdec.structured.backends`;
the engine option ``structured_backend`` sets the default, ``"builtin"`` if unset):

1. ``specdec_request_added``: check the options (cheap, proportional to them) and
   compile with the request's backend in the compile pool, never on the calling
   (engine) thread: a JSON schema's translation to a grammar is compile work too. The
   caller waits at most ``validate_wait_s`` to learn whether the constraint compiles (a
   grammar's tables are built, or the compile is done), so a bad constraint is rejected
   before it is queued (ValueError, HTTP 400); a cached one needs no wait (the first
   one also waits for the workers' start). The translation and the table build run in a
   capped worker process (:mod:`~specdec.structured.compile_worker`), killed past the
   timeout or its memory cap. The rest of the compile goes on in the pool while
   ``request.blocked_reason`` keeps the request out of the schedule (others run). A
   compile that fails after the wait or runs past ``compile_timeout_s`` unblocks the
   request, which then fails with the error. Either way ``context.work_ready`` is set,
   so an engine loop waiting on it wakes up.
2. ``specdec_schedule`` (last): cut speculative drafts at the first token the grammar
   rejects, so no step is spent verifying them; when speculation is on, extend the
   drafts with grammar-forced tokens (the grammar allows exactly one continuation:
   JSON-schema keys, punctuation), which cost no model work and are always accepted.
3. ``specdec_logits``: one int32 bitmask for the whole batch, applied in one op. A row
   after ``k`` drafts is masked from a copy of the matcher advanced over those drafts.
4. ``specdec_postprocess``: advance the matcher; finish with ``"stop"`` when nothing but
   EOS can follow. A token the grammar rejects fails the request (never unconstrained).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

import numpy as np
import torch

from specdec.hookspecs import hookimpl
from specdec.structured.backends import (
    BUILTIN,
    OPTION,
    BuiltinBackend,
    CompiledForBackend,
    StructuredBackend,
    StructuredBackends,
)
from specdec.structured.bitmask import allocate_token_bitmask, apply_token_bitmask_
from specdec.structured.compile import (
    grammar_tables,
    isolation_ready,
    start_isolation,
    warm_common_walks,
)
from specdec.structured.compile_worker import ISOLATION, MAX_WORKERS
from specdec.structured.errors import CompileTimeoutError, ConstraintError
from specdec.structured.matcher import Matcher
from specdec.structured.spec import OPTION_NAMES, ConstraintSpec
from specdec.structured.vocabulary import TokenVocabulary, token_vocabulary

PLUGIN_NAME = "structured"
EXTRA_OPTIONS = ("whitespace_pattern", "strict")  # strict: closed objects (OpenAI's)
BACKEND_OPTIONS = (OPTION,)  # structured_backend: per engine and per request
# A Lark grammar, regex or choice list past this is refused as too complex; a grammar file
# a user ships is trusted with a long limit.
DEFAULT_COMPILE_TIMEOUT_S = float(os.environ.get("SPECDEC_GRAMMAR_COMPILE_TIMEOUT", "60"))
# JSON schemas come in request bodies: one that cannot compile within this is refused
# ("grammar too complex") so a client cannot hold a compile worker for long.
DEFAULT_SCHEMA_COMPILE_TIMEOUT_S = float(os.environ.get("SPECDEC_SCHEMA_COMPILE_TIMEOUT", "5"))
# The longest request_added waits to learn whether a constraint compiles; past it the
# request is queued blocked and a late compile error fails it instead of rejecting it.
DEFAULT_VALIDATE_WAIT_S = float(os.environ.get("SPECDEC_GRAMMAR_VALIDATE_WAIT", "0.25"))
# The first constraint waits this long at most for the compile workers to start, so that
# it is judged within the validate wait like every later one (a bad one is refused).
WORKER_START_WAIT_S = 10.0
COMPILE_WORKERS = MAX_WORKERS  # threads waiting on compile workers (one worker each)
MAX_FORCED_DRAFTS = 8  # grammar-forced tokens appended to a request's drafts per step


@dataclass
class RequestGrammar:
    """One request's constraint: its matcher once compiled, or why it failed."""

    spec: ConstraintSpec
    matcher: Matcher | None = None
    error: str | None = None
    timer: threading.Timer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class StructuredOutputPlugin:
    def __init__(self, compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
                 validate_wait_s: float = DEFAULT_VALIDATE_WAIT_S,
                 schema_compile_timeout_s: float = DEFAULT_SCHEMA_COMPILE_TIMEOUT_S):
        self.compile_timeout_s = compile_timeout_s
        self.schema_compile_timeout_s = schema_compile_timeout_s
        self.validate_wait_s = min(validate_wait_s, compile_timeout_s, schema_compile_timeout_s)
        self.max_forced_drafts = 0
        self.vocab: TokenVocabulary | None = None
        self.backends = StructuredBackends()
        self.default_backend = BUILTIN
        self.work_ready: threading.Event | None = None
        self._workers_up = False  # the compile workers have answered (or were waited for)
        self._executor = ThreadPoolExecutor(max_workers=COMPILE_WORKERS,
                                            thread_name_prefix="grammar")
        self.counters = {"structured_requests": 0, "structured_mask_rows": 0,
                         "structured_mask_s": 0.0, "structured_compile_errors": 0,
                         "structured_forced_drafts": 0}

    @hookimpl
    def specdec_engine_options(self) -> list[str]:
        return list(BACKEND_OPTIONS)

    @hookimpl(trylast=True)  # after the plugins that register backends
    def specdec_engine_started(self, context) -> None:
        self.vocab = token_vocabulary(context.tokenizer, context.vocab_size,
                                      frozenset(context.eos_token_ids))
        registry = getattr(context, "structured_backends", None)
        self.backends = registry if registry is not None else StructuredBackends()
        self.backends.register(BUILTIN, BuiltinBackend(self.vocab, ISOLATION))
        options = getattr(context.config, "plugin_options", None) or {}
        self.default_backend = options.get(OPTION, BUILTIN)
        self.backends.get(self.default_backend)  # an unknown name stops the engine here
        self.work_ready = getattr(context, "work_ready", None)
        self.vocab.byte_trie  # noqa: B018 - build once now, not on the first request
        grammar_tables('start: "a"', use_disk_cache=False)  # lark's one-time set-up, now
        # off the engine thread, and not in the compile pool: a request never waits for it
        # Not a daemon: a process that exits right after start (a CLI error) waits for
        # these few walks instead of finalizing under a thread inside torch (SIGABRT).
        threading.Thread(target=warm_common_walks, args=(self.vocab,), daemon=False,
                         name="grammar-warm").start()
        if ISOLATION:
            start_isolation()
        if not context.config.speculative:
            return  # forced-text drafts only exist under speculation
        self.max_forced_drafts = MAX_FORCED_DRAFTS
        self.tokenizer = context.tokenizer
        token_bytes = self.vocab.token_bytes
        self._first_byte = np.array(  # -1: a token with no bytes (EOS, specials)
            [b[0] if b else -1 for b in token_bytes]
            + [-1] * (self.vocab.vocab_size - len(token_bytes)), dtype=np.int16)
        self._byte_token = {b[0]: i for i, b in enumerate(token_bytes) if b and len(b) == 1}

    @hookimpl
    def specdec_request_options(self) -> list[str]:
        return [*OPTION_NAMES, *EXTRA_OPTIONS, *BACKEND_OPTIONS]

    @hookimpl
    def specdec_request_added(self, request) -> None:
        extra = request.sampling_params.extra
        options = {k: extra[k] for k in OPTION_NAMES if k in extra}
        backend_name = extra.get(OPTION, self.default_backend)
        backend = self.backends.get(backend_name)
        if not options:
            if any(k in extra for k in EXTRA_OPTIONS):
                raise ConstraintError("whitespace_pattern and strict need json_schema")
            return
        strict = extra.get("strict", False)
        if not isinstance(strict, bool):
            raise ConstraintError(f"strict must be a boolean, got {strict!r:.40}")
        spec = backend.spec(**options, whitespace_pattern=extra.get("whitespace_pattern"),
                            strict=strict)
        compiled = backend.cached(spec)
        if compiled is None:
            compiled = self._compile(request, backend, spec)
        by_backend = f"structured_requests_{backend_name}"
        self.counters[by_backend] = self.counters.get(by_backend, 0) + 1
        if compiled is None:  # compiling in the background, the request blocked
            return
        request.plugin_data[PLUGIN_NAME] = RequestGrammar(spec, compiled.matcher())
        self.counters["structured_requests"] += 1

    def _compile(self, request, backend: StructuredBackend,
                 spec: ConstraintSpec) -> CompiledForBackend | None:
        """Compile in the pool; wait at most ``validate_wait_s`` to learn if it compiles.

        Returns the compiled constraint if it is done by then; None if it goes on in the
        background (the request is blocked until it ends); raises if it failed.
        """
        if isinstance(backend, BuiltinBackend) and backend.isolated and not self._workers_up:
            # Once: the first compile waits for the workers' start (~1 s), not the queue.
            isolation_ready(WORKER_START_WAIT_S)
            self._workers_up = True
        valid = threading.Event()  # set once it is known to compile, or when done
        future = self._executor.submit(backend.compile, spec, on_valid=valid.set,
                                       timeout_s=self.timeout_for(spec))
        future.add_done_callback(lambda _: valid.set())
        valid.wait(self.validate_wait_s)
        try:
            return future.result(timeout=0)
        except FutureTimeout:
            self._compile_in_background(request, spec, future)
            return None
        except Exception as exc:  # noqa: BLE001 - a bad constraint: reject the request
            self.counters["structured_compile_errors"] += 1
            if isinstance(exc, ConstraintError):
                raise
            raise ConstraintError(f"cannot compile {spec.origin}: {exc}") from None

    def timeout_for(self, spec: ConstraintSpec) -> float:
        """The compile limit of ``spec``: the short one for JSON schemas."""
        if spec.origin == "json_schema":
            return self.schema_compile_timeout_s
        return self.compile_timeout_s

    def _compile_in_background(self, request, spec: ConstraintSpec, future: Future) -> None:
        state = RequestGrammar(spec)
        request.plugin_data[PLUGIN_NAME] = state
        self.counters["structured_requests"] += 1
        request.blocked_reason = f"compiling {spec.origin}"
        left = self.timeout_for(spec) - self.validate_wait_s  # the caller waited that long
        state.timer = threading.Timer(left, self._timed_out, (request, state))
        state.timer.daemon = True
        state.timer.start()
        future.add_done_callback(lambda f: self._compiled(request, state, f))

    def _compiled(self, request, state: RequestGrammar, future: Future) -> None:
        with state.lock:
            if state.timer is not None:
                state.timer.cancel()
            if state.error is not None:
                return
            exc = future.exception()
            if exc is None:
                compiled: CompiledForBackend = future.result()
                try:
                    state.matcher = compiled.matcher()
                except Exception as matcher_exc:  # noqa: BLE001 - fails the request, not the pool
                    exc = matcher_exc
            if exc is not None:
                self.counters["structured_compile_errors"] += 1
                state.error = f"cannot compile {state.spec.origin}: {exc}"
            self._unblock(request)

    def _timed_out(self, request, state: RequestGrammar) -> None:
        with state.lock:
            if state.matcher is None and state.error is None:
                self.counters["structured_compile_errors"] += 1
                state.error = str(CompileTimeoutError(
                    f"grammar too complex: compiling {state.spec.origin} took longer than "
                    f"{self.timeout_for(state.spec)} s"
                ))
                self._unblock(request)

    def _unblock(self, request) -> None:
        """The request may be scheduled again; wake an engine loop waiting for work."""
        request.blocked_reason = None
        if self.work_ready is not None:
            self.work_ready.set()

    @hookimpl(trylast=True)
    def specdec_schedule(self, requests) -> None:
        for request in requests:
            state = request.plugin_data.get(PLUGIN_NAME)
            if state is None or state.matcher is None:
                continue
            if request.draft_token_ids:
                keep = state.matcher.validate_tokens(request.draft_token_ids)
                del request.draft_token_ids[keep:]
            if self.max_forced_drafts and request.sampling_params.extra.get("speculative", True):
                self._append_forced_tokens(request, state.matcher)

    def _forced_text(self, probe: Matcher, max_bytes: int = 64) -> str:
        """Bytes every continuation must start with, walked one byte token at a time."""
        forced = bytearray()
        while len(forced) < max_bytes and not probe.is_accepting():
            allowed = _allowed_ids(probe.allowed_mask(), self.vocab.vocab_size)
            firsts = self._first_byte[allowed]
            if allowed.size == 0 or firsts.min() < 0 or firsts.min() != firsts.max():
                break
            token = self._byte_token.get(int(firsts[0]))
            if token is None or not probe.accept_token(token):
                break
            forced.append(int(firsts[0]))
        return forced.decode("utf-8", errors="ignore")

    def _append_forced_tokens(self, request, matcher: Matcher) -> None:
        """Append the tokens of the text the grammar forces after the drafts (never EOS).

        BPE can spell a forced string many ways, so a single allowed *token* is rare;
        instead the forced *bytes* are found (every allowed token starts with the same
        byte), then tokenized the tokenizer's way and checked against the grammar.
        """
        room = request.sampling_params.max_tokens - len(request.output_token_ids) - 1
        limit = min(room, len(request.draft_token_ids) + self.max_forced_drafts)
        if len(request.draft_token_ids) >= limit:
            return
        ahead = matcher.copy()
        ahead.accept_tokens(request.draft_token_ids)
        text = self._forced_text(ahead.copy())
        if not text:
            return
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        forced = ids[: min(ahead.validate_tokens(ids), limit - len(request.draft_token_ids))]
        if not forced:
            return
        if request.draft_probs is not None:  # q of a forced token is a point mass
            one_hot = torch.zeros(len(forced), request.draft_probs.shape[-1],
                                  dtype=request.draft_probs.dtype)
            one_hot[torch.arange(len(forced)), torch.tensor(forced)] = 1.0
            request.draft_probs = torch.cat(
                [request.draft_probs[: len(request.draft_token_ids)], one_hot]
            )
        request.draft_token_ids.extend(forced)
        self.counters["structured_forced_drafts"] += len(forced)

    @hookimpl
    def specdec_logits(self, logits: torch.Tensor, rows) -> None:
        start = time.perf_counter()
        bitmask = None
        for i, row in enumerate(rows):
            state = row.request.plugin_data.get(PLUGIN_NAME)
            if state is None:
                continue
            matcher = _matcher_of(state)
            if row.draft_tokens_before:
                matcher = matcher.copy()
                matcher.accept_tokens(row.draft_tokens_before)  # stops at a rejected draft
            if bitmask is None:
                bitmask = allocate_token_bitmask(len(rows), logits.shape[-1])
            matcher.fill_bitmask(bitmask, i)
        if bitmask is None:
            return
        apply_token_bitmask_(logits, bitmask)
        self.counters["structured_mask_rows"] += len(rows)
        self.counters["structured_mask_s"] += time.perf_counter() - start

    @hookimpl
    def specdec_postprocess(self, request, new_token_ids: list[int]) -> str | None:
        state = request.plugin_data.get(PLUGIN_NAME)
        if state is None:
            return None
        matcher = _matcher_of(state)
        for tok in new_token_ids:
            if not matcher.accept_token(tok):
                raise ConstraintError(
                    f"token {tok} is not allowed by {state.spec.origin} here (sampled outside "
                    "the mask); the request is stopped rather than left unconstrained"
                )
        return "stop" if matcher.is_terminated() else None

    @hookimpl
    def specdec_request_finished(self, request, reason: str) -> None:
        state = request.plugin_data.pop(PLUGIN_NAME, None)
        if state is not None and state.timer is not None:
            state.timer.cancel()

    @hookimpl
    def specdec_stats(self) -> dict:
        return dict(self.counters)


def _matcher_of(state: RequestGrammar) -> Matcher:
    if state.error is not None:
        raise ConstraintError(state.error)
    if state.matcher is None:  # not compiled yet: the request should have been blocked
        raise ConstraintError(f"{state.spec.origin} is not compiled yet")
    return state.matcher


def _allowed_ids(packed_mask: np.ndarray, vocab_size: int) -> np.ndarray:
    bits = np.unpackbits(packed_mask.view(np.uint8), bitorder="little")[:vocab_size]
    return np.flatnonzero(bits)
