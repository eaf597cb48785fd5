"""The engine: requests in, one step at a time, outputs out.

A step moves one batch through the rooms (``docs/architecture.md`` draws it)::

    propose (specdec_schedule) -> schedule -> run -> logits plugins -> sample
      -> Scheduler.update -> post-process (stops, specdec_postprocess) -> outputs

The engine owns the live requests and the plugin calls around each stage, with
their failure isolation (``specdec.hookspecs``); the stages own their state.
"""

from __future__ import annotations

import functools
import itertools
import time
from typing import TYPE_CHECKING, Any

import torch

from specdec import isa
from specdec.config import EngineConfig
from specdec.core.cpu_share import CpuShare, adaptive_by_env
from specdec.core.messages import RequestSample, RunnerOutput, SampleOutput, SchedulerOutput
from specdec.core.request import Request, RequestStatus
from specdec.engine.builder import build_engine_parts
from specdec.engine.gc_pause import cyclic_gc_paused
from specdec.engine.output_processor import OutputProcessor
from specdec.engine.validation import RequestRejectedError, RequestValidator
from specdec.engine_context import EngineContext
from specdec.model.registry import ModelRegistry
from specdec.model.weight_info import (
    has_nontemporal_projections,
    resident_weight_bytes,
    weight_layout,
)
from specdec.outputs import RequestOutput
from specdec.plugins.caller import HookCaller, PluginError
from specdec.plugins.manager import make_plugin_manager
from specdec.sampling_params import SamplingParams

if TYPE_CHECKING:
    from specdec.plugins.caller import Fail


class LLMEngine:
    def __init__(self, config: EngineConfig):
        with cyclic_gc_paused():  # the load's objects all stay: no rescans on the way
            self._build(config)

    def _build(self, config: EngineConfig) -> None:
        self.config = config
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        self.cpu_share = CpuShare(torch.get_num_threads(),
                                  enabled=config.adaptive_threads and adaptive_by_env())
        self.step_threads = self.cpu_share.max_threads  # the last step's thread count
        self.pm = make_plugin_manager(
            config.plugins, config.disable_plugins, config.load_entry_points
        )
        self.hooks = HookCaller(self.pm)
        self.registry = ModelRegistry()
        self._start_hook("specdec_register_models", registry=self.registry)
        engine_options = frozenset(
            itertools.chain.from_iterable(self._start_hook("specdec_engine_options"))
        )
        unknown = set(config.plugin_options) - engine_options
        if unknown:
            raise ValueError(
                f"unknown engine option(s) {sorted(unknown)}; plugins accept "
                f"{sorted(engine_options) or 'none'}"
            )

        parts = build_engine_parts(config, self.registry)
        self.model_dir, self.model_config = parts.model_dir, parts.model_config
        self.tokenizer, self.dtype, self.model = parts.tokenizer, parts.dtype, parts.model
        self.kv_cache_dtype = parts.kv_cache_dtype
        self.max_model_len = parts.max_model_len
        self.kv, self.scheduler = parts.kv, parts.scheduler
        self.kernels, self.runner, self.sampler = parts.kernels, parts.runner, parts.sampler
        self.eos_token_ids = parts.eos_token_ids
        self.weight_bytes = resident_weight_bytes(self.model)  # measured once: fixed after load
        self.vocab_size = self.model_config.vocab_size
        self.requests: dict[str, Request] = {}  # live requests by id
        self.outputs = OutputProcessor(self.tokenizer, self.eos_token_ids)
        self._ids = itertools.count()
        self.counters = {"steps": 0, "prompt_tokens": 0, "generation_tokens": 0,
                         "requests_finished": 0, "forward_tokens": 0,
                         "steps_on_fewer_threads": 0}
        self.context = EngineContext(
            tokenizer=self.tokenizer,
            vocab_size=self.vocab_size,
            eos_token_ids=self.eos_token_ids,
            config=config,
            model_config=self.model_config,
            kv_cache_manager=self.kv,
            dtype=self.dtype,
            kv_cache_dtype=self.kv_cache_dtype,
            model_registry=self.registry,
        )
        self._start_hook("specdec_engine_started", context=self.context)
        self.request_options = frozenset(
            itertools.chain.from_iterable(self._start_hook("specdec_request_options"))
        )
        self.validator = RequestValidator(
            self.tokenizer, self.vocab_size, self.max_model_len, self.kv, self.request_options
        )

    def _start_hook(self, hook: str, **kwargs: Any) -> list[Any]:
        """A start-up hook: a failure stops the engine with the plugin's own exception."""
        try:
            return self.hooks.each(hook, **kwargs)
        except PluginError as err:
            err.error.add_note(str(err))
            raise err.error from None

    # ---------------------------------------------------------------- requests

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
    ) -> Request:
        params = params or SamplingParams()
        text, token_ids = self.validator.prompt_tokens(prompt, params)
        request_id = request_id or f"req-{next(self._ids)}"
        if request_id in self.requests:
            raise RequestRejectedError(f"duplicate request id {request_id!r}")
        req = Request(request_id, text, token_ids, params)
        if params.seed is not None:
            req.generator = torch.Generator().manual_seed(params.seed)
        try:
            self.hooks.each("specdec_request_added", request=req)
        except PluginError as err:
            self._notify_finished(req, "error")  # plugins that accepted it release their state
            if isinstance(err.error, ValueError):  # a rejection: the caller gets it as raised
                raise err.error from None
            raise
        self.outputs.add_request(req)
        self.requests[request_id] = req
        self.scheduler.add(req)
        self.counters["prompt_tokens"] += len(token_ids)
        return req

    def abort(self, request_id: str) -> RequestOutput | None:
        """Stop a request now; its blocks go back to the pool. Returns its final output."""
        req = self.requests.get(request_id)
        if req is None:
            return None
        self._finish(req, "abort")
        return self._output(req)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # -------------------------------------------------------------------- step

    @torch.inference_mode()
    def step(self) -> list[RequestOutput]:
        """Run one step; return an output for every request that progressed or ended."""
        updated: dict[str, Request] = {}  # requests with news for their caller, in order
        fail = functools.partial(self._fail, updated=updated)  # a plugin failed a request
        self._share_cores()
        self._propose(fail)
        scheduler_output = self._schedule(fail)
        if not scheduler_output.is_empty:
            runner_output = self._apply_logits_plugins(self._run(scheduler_output), fail)
            sample_output = self.sampler.sample(runner_output)
            self.scheduler.update(scheduler_output, sample_output)
            self._postprocess(sample_output, updated)
        return [self._output(req) for req in updated.values()]

    def _share_cores(self) -> None:
        """Run this step on the cores other tasks leave free (core/cpu_share.py)."""
        threads = self.cpu_share.threads()
        if threads != torch.get_num_threads():  # this thread's setting: steps run here
            torch.set_num_threads(threads)
        self.step_threads = threads
        if threads < self.cpu_share.max_threads:
            self.counters["steps_on_fewer_threads"] += 1

    def _propose(self, fail: Fail) -> None:
        """``specdec_schedule``: proposers attach draft tokens to decoding requests."""
        decoding = self.scheduler.decoding_requests()
        if decoding:
            self.hooks.per_request("specdec_schedule", decoding,
                                   lambda reqs: {"requests": reqs}, fail)

    def _schedule(self, fail: Fail) -> SchedulerOutput:
        """The scheduler's step, shown to ``specdec_batch_scheduled``; requests a plugin
        failed there leave it before the forward."""
        sched = self.scheduler.schedule()
        if not sched.is_empty:
            self.hooks.per_request("specdec_batch_scheduled", [s.request for s in sched.scheduled],
                                   lambda reqs: {"scheduler_output": _view(sched, reqs)}, fail)
            sched.scheduled = [s for s in sched.scheduled if not s.request.is_finished]
        return sched

    def _run(self, scheduler_output: SchedulerOutput) -> RunnerOutput:
        runner_output = self.runner.execute(scheduler_output)
        self.counters["steps"] += 1
        self.counters["forward_tokens"] += scheduler_output.total_tokens
        return runner_output

    def _apply_logits_plugins(self, runner_output: RunnerOutput, fail: Fail) -> RunnerOutput:
        """``specdec_logits`` edits the logits in place; the rows of requests it failed
        are dropped."""
        logits, rows = runner_output.logits, runner_output.rows
        if not rows:
            return runner_output
        self.hooks.logits(logits, rows, self.runner.recompute_logits, fail)
        live = [i for i, row in enumerate(rows) if not row.request.is_finished]
        if len(live) == len(rows):
            return runner_output
        return RunnerOutput(logits[live], [rows[i] for i in live])

    def _postprocess(self, sample_output: SampleOutput, updated: dict[str, Request]) -> None:
        now = time.monotonic()
        for sample in sample_output.samples:
            self._append_tokens(sample, now)
            updated[sample.request.request_id] = sample.request

    def _append_tokens(self, sample: RequestSample, now: float) -> None:
        """Output, stop checks and ``specdec_postprocess`` for one request's new tokens."""
        req = sample.request
        kept, reason = self.outputs.append_tokens(sample, now)
        self.counters["generation_tokens"] += len(kept)
        req.is_finished_pending = reason is not None
        try:
            reasons = self.hooks.each("specdec_postprocess", request=req, new_token_ids=kept,
                                      num_accepted_drafts=sample.num_accepted_drafts)
        except PluginError as err:
            self._fail(req, err)
            return
        reason = reason or next((r for r in reasons if r), None)
        if reason:
            self._finish(req, reason)

    # ---------------------------------------------------------- request endings

    def _fail(self, req: Request, err: PluginError, updated: dict | None = None) -> None:
        req.error = str(err)
        req.error_is_client = isinstance(err.error, ValueError)  # ConstraintError included
        self._finish(req, "error")
        if updated is not None:
            updated[req.request_id] = req

    def _finish(self, req: Request, reason: str) -> None:
        if req.is_finished:
            return
        self.scheduler.remove(req)
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        req.finish_time = time.monotonic()
        req.clear_drafts()
        self.outputs.finish(req, reason)
        self.counters["requests_finished"] += 1
        self._notify_finished(req, reason)

    def _notify_finished(self, req: Request, reason: str) -> None:
        _, failures = self.hooks.every("specdec_request_finished", request=req, reason=reason)
        for err in failures:  # every plugin still released its state; this one is reported
            self.hooks.report(err)

    def _output(self, req: Request) -> RequestOutput:
        out = self.outputs.make_output(req)
        if req.is_finished:  # its final output: forget it
            self.requests.pop(req.request_id, None)
            self.outputs.forget(req.request_id)
        return out

    # ------------------------------------------------------------------- stats

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = dict(self.counters)
        layout = weight_layout(self.model)
        stats.update(
            preemptions=self.scheduler.num_preemptions,
            kv_blocks_total=self.kv.num_blocks,
            kv_blocks_free=self.kv.num_free_blocks,
            kv_blocks_used=self.kv.num_blocks - self.kv.num_free_blocks,
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            dtype=str(self.dtype).removeprefix("torch."),
            kv_cache_dtype=str(self.kv_cache_dtype).removeprefix("torch."),
            kv_cache_bytes=sum(cache.nbytes for cache in self.runner.kv_caches),
            # blocks whose pages are in ahead of their first write (core/kv_prefault.py)
            kv_blocks_prefaulted=self.runner.kv_blocks_prefaulted(),
            isa=isa.level(),
            weight_layout=layout,
            weight_bytes=self.weight_bytes,
            batch_invariant=self.runner.invariant_attention,  # outputs independent of the batch
            fused_kernels=self.runner.kernels is not None,
            # weights read once a step loaded with a non-temporal hint (kernels/nontemporal.h)
            nontemporal_weights=bool(self.kernels is not None
                                     and self.kernels.nontemporal_weights()
                                     and has_nontemporal_projections(self.model)),
            threads=self.step_threads,
        )
        extras, failures = self.hooks.every("specdec_stats")
        for extra in extras:
            stats.update(extra)
        for err in failures:
            self.hooks.report(err)
        stats.update(self.hooks.stats())
        return stats


def _view(sched: SchedulerOutput, requests: list[Request]) -> SchedulerOutput:
    """The step as ``requests`` see it: all of it, or a part on a per-request retry."""
    if len(requests) == len(sched.scheduled):
        return sched
    keep = set(requests)
    return SchedulerOutput([s for s in sched.scheduled if s.request in keep], sched.preempted)
