"""The built-in engine plugin: grammar masks through the ordinary hooks, nothing special.

Per request (options in ``SamplingParams.extra``: ``grammar``, ``regex``,
``json_schema``, ``choice``, plus ``whitespace_pattern`` for schemas):

1. ``specdec_request_added``: validate synchronously (a bad constraint rejects the
   request before it is queued); compile in a background thread while
   ``request.blocked_reason`` keeps it out of the schedule; a compile that fails or
   runs past ``compile_timeout_s`` unblocks the request, which then fails with the error.
2. ``specdec_schedule`` (last): cut speculative drafts at the first token the grammar
   rejects, so no step is spent verifying them.
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
from dataclasses import dataclass, field

import torch

from specdec.hookspecs import hookimpl
from specdec.structured.bitmask import allocate_token_bitmask, apply_token_bitmask_
from specdec.structured.compile import CompiledConstraint, compile_spec, grammar_tables
from specdec.structured.errors import CompileTimeoutError, ConstraintError
from specdec.structured.matcher import Matcher
from specdec.structured.spec import OPTION_NAMES, ConstraintSpec, constraint_spec
from specdec.structured.vocabulary import TokenVocabulary, token_vocabulary

PLUGIN_NAME = "structured"
EXTRA_OPTIONS = ("whitespace_pattern",)
DEFAULT_COMPILE_TIMEOUT_S = float(os.environ.get("SPECDEC_GRAMMAR_COMPILE_TIMEOUT", "60"))


@dataclass
class RequestGrammar:
    """One request's constraint: its matcher once compiled, or why it failed."""

    spec: ConstraintSpec
    matcher: Matcher | None = None
    error: str | None = None
    timer: threading.Timer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class StructuredOutputPlugin:
    def __init__(self, compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S):
        self.compile_timeout_s = compile_timeout_s
        self.vocab: TokenVocabulary | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar")
        self.counters = {"structured_requests": 0, "structured_mask_rows": 0,
                         "structured_mask_s": 0.0, "structured_compile_errors": 0}

    @hookimpl
    def specdec_engine_started(self, context) -> None:
        self.vocab = token_vocabulary(context.tokenizer, context.vocab_size,
                                      frozenset(context.eos_token_ids))
        self.vocab.byte_matrix  # noqa: B018 - build once now, not on the first request

    @hookimpl
    def specdec_request_options(self) -> list[str]:
        return [*OPTION_NAMES, *EXTRA_OPTIONS]

    @hookimpl
    def specdec_request_added(self, request) -> None:
        extra = request.sampling_params.extra
        options = {k: extra[k] for k in OPTION_NAMES if k in extra}
        if not options:
            if any(k in extra for k in EXTRA_OPTIONS):
                raise ConstraintError("whitespace_pattern needs json_schema")
            return
        spec = constraint_spec(**options, whitespace_pattern=extra.get("whitespace_pattern"))
        if spec.kind == "grammar":
            grammar_tables(spec.source)  # parse + LALR tables: the validation, disk-cached
        state = RequestGrammar(spec)
        request.plugin_data[PLUGIN_NAME] = state
        self.counters["structured_requests"] += 1
        future = self._executor.submit(compile_spec, spec, self.vocab)
        if future.done() and future.exception() is None:
            state.matcher = future.result().matcher()
            return
        request.blocked_reason = f"compiling {spec.origin}"
        state.timer = threading.Timer(self.compile_timeout_s, self._timed_out, (request, state))
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
                compiled: CompiledConstraint = future.result()
                state.matcher = compiled.matcher()
            else:
                self.counters["structured_compile_errors"] += 1
                state.error = f"cannot compile {state.spec.origin}: {exc}"
            request.blocked_reason = None

    def _timed_out(self, request, state: RequestGrammar) -> None:
        with state.lock:
            if state.matcher is None and state.error is None:
                self.counters["structured_compile_errors"] += 1
                state.error = str(CompileTimeoutError(
                    f"compiling {state.spec.origin} took longer than {self.compile_timeout_s} s"
                ))
                request.blocked_reason = None

    @hookimpl(trylast=True)
    def specdec_schedule(self, requests) -> None:
        for request in requests:
            state = request.plugin_data.get(PLUGIN_NAME)
            if state is not None and state.matcher is not None and request.draft_token_ids:
                keep = state.matcher.validate_tokens(request.draft_token_ids)
                del request.draft_token_ids[keep:]

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
