"""Hook specifications: the contracts between the engine and its plugins.

Every built-in feature (grammar masks, speculation, prefix caching) is a plugin on
these hooks, exactly like a third-party package registered through the ``specdec``
entry-point group.

How implementations are called (:mod:`specdec.plugins.caller`): one at a time, in
pluggy's order (``tryfirst`` first, ``trylast`` last, otherwise the most recently
registered first), each with only the parameters it declares, so an implementation
may accept any subset of a hook's parameters and specs can grow without breaking
plugins. Hook wrappers (``wrapper=True``, ``hookwrapper=True``) are refused at engine
start: they cannot wrap one implementation's failure without hiding it.

One engine step runs the hooks in this order::

    specdec_schedule  ->  scheduler  ->  specdec_batch_scheduled  ->  forward
      ->  specdec_logits  ->  sampler  ->  specdec_postprocess (per request)

Failure isolation (each spec's ``Failure:`` line says which applies):

- per request: the request fails (finish_reason ``"error"``, ``RequestOutput.error``
  names the plugin and hook); the engine and the other requests go on. A ``ValueError``
  (``ConstraintError`` included) means the request's input was bad:
  ``RequestOutput.error_is_client`` is set and the server answers 400, not 500.
- batch hooks (``specdec_schedule``, ``specdec_batch_scheduled``, ``specdec_logits``):
  an implementation that raises on the batch is called again one request at a time,
  and only the requests it raises on fail; so it must give the same answer for a
  request alone as in the batch, and accept being called again for part of the batch
  (``specdec_logits`` gets its logits restored first). If it raises for the batch but
  for no request alone, the failure is reported and the step runs.
- reported: a failure no request can carry (cleanup, stats, a step-level failure) is
  logged on the ``specdec.plugins`` logger and shown by ``LLM.stats()`` as
  ``plugin_errors`` (a count) and ``plugin_error_<plugin>`` (the last message).
- start-up hooks: the engine is not built; the plugin's exception propagates with a
  note naming the plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from specdec.core.request import Request
    from specdec.core.scheduler_output import SchedulerOutput
    from specdec.engine_context import EngineContext
    from specdec.model.registry import ModelRegistry
    from specdec.sample.logits_rows import LogitsRow

PROJECT_NAME = "specdec"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def specdec_register_models(registry: ModelRegistry) -> None:
    """Register model implementations by Hugging Face ``architectures`` name.

    When: once, when an ``LLM`` is created, before the model is loaded.
    registry: call ``registry.register("LlamaForCausalLM", factory)``; a factory takes
        the HF config and returns an ``nn.Module`` with the paged-attention forward
        contract of :class:`specdec.model.llama.LlamaForCausalLM`.
    Mutates: only the registry. Cost: negligible.
    Failure: start-up (the ``LLM`` is not built).
    """


@hookspec
def specdec_engine_options() -> list[str]:
    """Names of engine-wide settings this plugin owns.

    When: once, when an ``LLM`` is created, before the model is loaded.
    ``LLM(name=value)`` (and ``EngineConfig.plugin_options``) carry them; the plugin
    reads ``context.config.plugin_options`` in ``specdec_engine_started``. A name no
    plugin claims is an error (``ValueError``), so a typo never goes unnoticed.
    Returns: a list of option names. Cost: negligible.
    Failure: start-up (the ``LLM`` is not built).
    """


@hookspec
def specdec_engine_started(context: EngineContext) -> None:
    """The engine is built; plugins receive what they need to run.

    When: once, after the model and tokenizer are loaded, before any request.
    context: tokenizer, vocab size of the logits, EOS ids, engine config, and
        ``context.kv_cache_manager`` for plugins that extend block management;
        ``context.work_ready`` (a ``threading.Event``) for plugins that block requests
        (see ``specdec_request_added``); ``context.structured_backends``, the registry
        of structured-output backends (see below).
    Mutates: plugin state; may register in ``context.structured_backends``.
    Structured-output backends: a plugin that compiles constraints (grammar, regex,
        json_schema, choice) calls ``context.structured_backends.register(name,
        backend)`` here, with a :class:`specdec.structured.backends.StructuredBackend`
        bound to this engine's tokenizer; the built-in ``structured`` plugin runs last
        (``trylast``), registers ``"builtin"`` and checks the engine option
        ``structured_backend`` against the names registered by then. Requests select a
        backend with the request option ``structured_backend``.
    Cost: may be slow (compiling, allocating); runs once. A backend should build its
        tokenizer tables lazily or in the background if they are costly.
    Failure: start-up (the ``LLM`` is not built); so is a name registered twice and an
        unknown ``structured_backend``.
    """


@hookspec
def specdec_request_options() -> list[str]:
    """Names of per-request options this plugin understands.

    When: once at engine start. ``LLM.generate(prompt, grammar=...)`` puts such
    options in ``SamplingParams.extra``; an option no plugin claims is an error.
    Returns: a list of option names. Cost: negligible.
    Failure: start-up (the ``LLM`` is not built).
    """


@hookspec
def specdec_request_added(request: Request) -> None:
    """A request enters the engine (before it is queued).

    When: in ``add_request``, on the caller's thread, before the request is queued.
    request: read ``request.sampling_params`` (incl. ``.extra``), ``prompt_token_ids``.
        May set ``request.plugin_data[<plugin name>]`` and ``request.blocked_reason``
        (a non-empty string keeps the request from being scheduled until cleared,
        e.g. while a grammar compiles in the background). A plugin that clears it
        later (from any thread) then sets ``context.work_ready``: an engine loop with
        nothing but blocked requests waits on that event (polling only every ~50 ms
        as a safety net).
    Raise: ``ValueError`` (or a subclass) to reject the request; the caller gets it
        as raised (HTTP 400 on the server).
    Cost: should be quick; slow work goes to a background thread.
    Failure: per request: any other exception rejects it too, as a ``PluginError``
        naming the plugin. Either way the implementations after it are not called and
        every plugin gets ``specdec_request_finished(reason="error")``, so plugins that
        accepted the request release their state.
    """


@hookspec
def specdec_schedule(requests: list[Request]) -> None:
    """Before the scheduler builds the step: the running requests whose prompt is done.

    When: every step, before token budgets are assigned.
    requests: running requests that will decode this step if scheduled.
    Mutates: may set ``request.draft_token_ids`` (speculative proposals); the
        scheduler then schedules them like any other uncomputed tokens, so a
        request with k drafts is verified by scheduling k + 1 tokens. The
        scheduler may shorten the drafts to fit its budget or KV pool.
    Cost: must stay well under the cost of one forward (<~1 ms per request).
    Failure: batch hook, per request; a failed request's drafts are dropped.
    """


@hookspec
def specdec_batch_scheduled(scheduler_output: SchedulerOutput) -> None:
    """The step is fixed; the forward is about to run.

    When: every step, after scheduling, before the model forward.
    scheduler_output: read-only view of what runs (requests, token counts, drafts).
    Use: start work that overlaps the forward (e.g. grammar masks for the step).
    Mutates: nothing in the engine. Cost: < ~1 ms per request.
    Failure: batch hook, per request; on a retry ``scheduler_output`` holds one
        request. Failed requests are taken out of the step before the forward; a
        failure for the step alone is reported and the step runs.
    """


@hookspec
def specdec_logits(logits: Any, rows: list[LogitsRow]) -> None:
    """Modify the step's logits in place before sampling.

    When: every step, after the forward, before sampling.
    logits: float32 tensor ``[len(rows), vocab_size]``, one row per sampled position.
    rows: ``rows[i]`` says which request row ``i`` belongs to and which position:
        ``row.position`` is the index of the output token this row predicts
        (``len(request.output_token_ids)`` for an ordinary decode row), and
        ``row.draft_tokens_before`` the draft tokens assumed accepted before it
        (empty for the first row of a request). With speculation a request has
        k + 1 rows; a logits processor must treat each row as if the drafts
        before it were already output.
    Mutates: ``logits`` in place (mask with ``-inf``, add biases). Nothing else.
    Cost: the whole hook for a batch should stay under ~1 ms + 20 µs per row.
    Failure: batch hook, per request: the logits are recomputed and every
        implementation runs again on each request's rows alone; the rows of a
        request that fails are not sampled.
    """


@hookspec
def specdec_postprocess(
    request: Request, new_token_ids: list[int], num_accepted_drafts: int
) -> str | None:
    """A request got new tokens (already appended to ``request.output_token_ids``).

    When: every step, once per request that produced tokens, after stop checks of
        the engine (max_tokens, EOS, stop strings) are computed but before the
        request is finished, so plugins see every accepted token.
    request: the request; ``request.is_finished_pending`` tells whether the engine
        will finish it anyway.
    new_token_ids: the tokens accepted this step (several with speculation), cut
        after the first one that stops the request.
    num_accepted_drafts: how many of the request's draft tokens verification accepted
        this step (0 without drafts), counted before a stop cut ``new_token_ids``, so
        it may exceed ``len(new_token_ids) - 1``. Implementations that do not use it
        leave it out of their signature, as with every parameter.
    Returns: a finish reason (``"stop"``) to finish the request now, or None.
    Mutates: plugin state; must not edit the token lists.
    Cost: < ~100 µs per request.
    Failure: per request; the implementations after it are not called for it.
    """


@hookspec
def specdec_request_finished(request: Request, reason: str) -> None:
    """A request left the engine (stop, length, abort or error).

    When: once per request, after it is removed from the scheduler and its KV
        blocks are freed (also when ``specdec_request_added`` rejected it).
    request: the finished request (``request.error`` says why when reason is error).
    reason: ``"stop"``, ``"length"``, ``"abort"`` or ``"error"``.
    Mutates: plugin state only (release per-request state here). Cost: < ~100 µs.
    Failure: must not raise; if it does, every other implementation is still called
        and the failure is reported (the request's output is already decided).
    """


@hookspec
def specdec_stats() -> dict[str, Any]:
    """Metrics a plugin adds to ``LLM.stats()`` (e.g. prefix-cache hit rate).

    When: on demand (``LLM.stats()``, the server's ``/metrics`` and ``/stats``).
    Returns: a flat dict of name -> number (strings show in ``/stats`` only).
    Mutates: nothing. Cost: cheap.
    Failure: reported; the other plugins' stats are still returned.
    """
