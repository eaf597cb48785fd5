"""The engine: requests in, one step at a time, outputs out.

``step()`` is: plugins propose -> schedule -> forward -> logits plugins -> sample
-> accept (drafts) -> detokenize and stop checks -> post-process plugins.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Sequence
from typing import Any

import torch

from specdec import isa, kernels
from specdec.config import EngineConfig
from specdec.core.kv_cache_manager import KVCacheManager
from specdec.core.model_runner import ModelRunner
from specdec.core.request import Request, RequestStatus
from specdec.core.scheduler import Scheduler, SchedulerConfig
from specdec.core.scheduler_output import SchedulerOutput
from specdec.detokenizer import IncrementalDetokenizer
from specdec.engine_context import EngineContext
from specdec.model import loader
from specdec.model.builder import build_model, load_hf_config, resolve_dtype
from specdec.model.packed_linear import pack_linears, weight_layout
from specdec.model.registry import ModelRegistry
from specdec.outputs import RequestMetrics, RequestOutput
from specdec.plugins.caller import HookCaller, PluginError
from specdec.plugins.manager import make_plugin_manager
from specdec.sample.logits_rows import LogitsRow
from specdec.sample.sampler import Sampler
from specdec.sampling_params import SamplingParams


class RequestRejectedError(ValueError):
    """A request cannot be served (bad prompt, too long, rejected by a plugin)."""


class LLMEngine:
    def __init__(self, config: EngineConfig):
        self.config = config
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
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

        model_dir = loader.resolve_model_dir(config.model)
        self.model_dir = model_dir
        self.model_config = load_hf_config(model_dir)
        self.registry.resolve(self.model_config)  # unsupported architecture: fail before loading
        self.tokenizer = _load_tokenizer(model_dir)
        self.dtype = resolve_dtype(config.dtype)
        self.model = build_model(model_dir, self.model_config, self.registry, self.dtype)

        context_len = self.model_config.max_position_embeddings
        self.max_model_len = min(config.max_model_len or context_len, context_len)
        num_blocks = config.num_kv_blocks or max(
            1,
            int(config.kv_cache_memory_gb * 2**30)
            // ModelRunner.kv_bytes_per_block(self.model_config, config.block_size, self.dtype),
        )
        self.kv = KVCacheManager(num_blocks, config.block_size)
        self.scheduler = Scheduler(
            SchedulerConfig(
                config.max_num_batched_tokens,
                config.max_num_seqs,
                config.long_prefill_token_threshold,
            ),
            self.kv,
        )
        self.kernels = kernels.load() if config.fused_kernels else None
        if config.fused_kernels:
            pack_linears(self.model, config.max_num_seqs, self.kernels)
        self.runner = ModelRunner(
            self.model, num_blocks, config.block_size, self.dtype, self.kernels
        )
        self.sampler = Sampler(config.seed, self.kernels)
        self.eos_token_ids = _eos_token_ids(model_dir, self.model_config, self.tokenizer)
        self.vocab_size = self.model_config.vocab_size
        self.requests: dict[str, Request] = {}
        self._detok: dict[str, IncrementalDetokenizer] = {}
        self._deltas: dict[str, tuple[str, list[int]]] = {}  # output not yet reported
        self._ids = itertools.count()
        self.counters = {"steps": 0, "prompt_tokens": 0, "generation_tokens": 0,
                         "requests_finished": 0, "forward_tokens": 0}
        self.context = EngineContext(
            tokenizer=self.tokenizer,
            vocab_size=self.vocab_size,
            eos_token_ids=self.eos_token_ids,
            config=config,
            model_config=self.model_config,
            kv_cache_manager=self.kv,
            dtype=self.dtype,
            model_registry=self.registry,
        )
        self._start_hook("specdec_engine_started", context=self.context)
        self.request_options = frozenset(
            itertools.chain.from_iterable(self._start_hook("specdec_request_options"))
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
        unknown = set(params.extra) - self.request_options
        if unknown:
            raise RequestRejectedError(
                f"unknown request option(s) {sorted(unknown)}; plugins accept "
                f"{sorted(self.request_options) or 'none'}"
            )
        if isinstance(prompt, str):
            if not prompt:
                raise RequestRejectedError("prompt is empty")
            text, token_ids = prompt, self.tokenizer.encode(prompt, add_special_tokens=False)
        else:
            text, token_ids = None, [int(t) for t in prompt]
            bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
            if bad:
                raise RequestRejectedError(
                    f"prompt token ids out of range [0, {self.vocab_size}): {bad[:5]}"
                )
        if not token_ids:
            raise RequestRejectedError("prompt is empty (no tokens)")
        self._check_fits(len(token_ids), params.max_tokens)
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
        self._detok[request_id] = IncrementalDetokenizer(
            self.tokenizer,
            stop=params.stop,
            include_stop_str_in_output=params.include_stop_str_in_output,
            skip_special_tokens=params.skip_special_tokens,
        )
        self.requests[request_id] = req
        self.scheduler.add(req)
        self.counters["prompt_tokens"] += len(token_ids)
        return req

    def _check_fits(self, num_prompt: int, max_tokens: int) -> None:
        total = num_prompt + max_tokens
        if num_prompt >= self.max_model_len:
            raise RequestRejectedError(
                f"prompt has {num_prompt} tokens but the model's context is "
                f"{self.max_model_len} tokens"
            )
        if total > self.max_model_len:
            raise RequestRejectedError(
                f"prompt ({num_prompt} tokens) + max_tokens ({max_tokens}) = {total} exceeds "
                f"the model's context of {self.max_model_len} tokens; lower max_tokens"
            )
        needed = self.kv.blocks_needed(total)
        if needed > self.kv.num_blocks:
            raise RequestRejectedError(
                f"prompt ({num_prompt} tokens) + max_tokens ({max_tokens}) needs {needed} KV "
                f"blocks but the pool has only {self.kv.num_blocks}; raise kv_cache_memory_gb "
                "or num_kv_blocks, or lower max_tokens"
            )

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
        updated: dict[str, Request] = {}
        decoding = self.scheduler.decoding_requests()
        fail = functools.partial(self._fail, updated=updated)
        if decoding:
            self.hooks.per_request("specdec_schedule", decoding,
                                   lambda reqs: {"requests": reqs}, fail)
        sched = self.scheduler.schedule()
        if not sched.is_empty:
            self.hooks.per_request("specdec_batch_scheduled", [s.request for s in sched.scheduled],
                                   lambda reqs: {"scheduler_output": _view(sched, reqs)}, fail)
            sched.scheduled = [s for s in sched.scheduled if not s.request.is_finished]
        if sched.is_empty:
            return [self._output(r) for r in updated.values()]
        logits, rows = self.runner.execute(sched)
        self.counters["steps"] += 1
        self.counters["forward_tokens"] += sched.total_tokens
        for s in sched.scheduled:
            s.request.num_computed_tokens += s.num_tokens
        if rows:
            self.hooks.logits(logits, rows, self.runner.recompute_logits, fail)
            live = [i for i, r in enumerate(rows) if not r.request.is_finished]
            if len(live) < len(rows):  # a plugin failed some requests: drop their rows
                logits, rows = logits[live], [rows[i] for i in live]
            if rows:
                sampled = self.sampler(logits, rows)
                self._accept(rows, sampled.token_ids, sampled.logprobs, updated)
        return [self._output(r) for r in updated.values()]

    def _accept(self, rows: list[LogitsRow], tokens: list[int], logprobs, updated) -> None:
        by_request: dict[Request, list[tuple[LogitsRow, int, Any]]] = {}
        for row, tok, lp in zip(rows, tokens, logprobs, strict=True):
            by_request.setdefault(row.request, []).append((row, tok, lp))
        now = time.monotonic()
        for req, items in by_request.items():
            accepted: list[int] = []
            for row, tok, lp in items:  # a draft is accepted while the sample equals it
                accepted.append(tok)
                if lp is not None:
                    req.logprobs.append(lp)
                if row.draft_token is None or tok != row.draft_token:
                    break
            num_drafts = len(req.draft_token_ids)
            if num_drafts:
                req.num_computed_tokens -= num_drafts - (len(accepted) - 1)
                self.kv.trim(req, req.num_computed_tokens + 1)  # drop rejected drafts' KV
            req.clear_drafts()
            self._append_tokens(req, accepted, now)
            updated[req.request_id] = req

    def _append_tokens(self, req: Request, new_tokens: list[int], now: float) -> None:
        params = req.sampling_params
        reason = None
        kept: list[int] = []
        for tok in new_tokens:
            kept.append(tok)
            req.output_token_ids.append(tok)
            is_eos = tok in self.eos_token_ids and not params.ignore_eos
            if is_eos or tok in params.stop_token_ids:
                reason = "stop"
            elif len(req.output_token_ids) >= params.max_tokens:
                reason = "length"
            if reason:
                break
        if req.logprobs and len(req.logprobs) > len(req.output_token_ids):
            del req.logprobs[len(req.output_token_ids) :]
        if req.first_token_time is None:
            req.first_token_time = now
        req.last_token_time = now
        self.counters["generation_tokens"] += len(kept)
        detok = self._detok[req.request_id]
        self._deltas[req.request_id] = (detok.add_tokens(kept), kept)
        if detok.stopped_by is not None:
            reason = "stop"
        req.is_finished_pending = reason is not None
        try:
            reasons = self.hooks.each("specdec_postprocess", request=req, new_token_ids=kept)
        except PluginError as err:
            self._fail(req, err)
            return
        reason = reason or next((r for r in reasons if r), None)
        if reason:
            self._finish(req, reason)

    # ------------------------------------------------------------ plugin calls

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
        detok = self._detok[req.request_id]
        if reason != "abort":
            tail = detok.flush()
            text, tokens = self._deltas.get(req.request_id, ("", []))
            self._deltas[req.request_id] = (text + tail, tokens)
        self.counters["requests_finished"] += 1
        self._notify_finished(req, reason)

    def _notify_finished(self, req: Request, reason: str) -> None:
        _, failures = self.hooks.every("specdec_request_finished", request=req, reason=reason)
        for err in failures:  # every plugin still released its state; this one is reported
            self.hooks.report(err)

    # ----------------------------------------------------------------- outputs

    def _output(self, req: Request) -> RequestOutput:
        detok = self._detok[req.request_id]
        delta_text, delta_tokens = self._deltas.pop(req.request_id, ("", []))
        out = RequestOutput(
            request_id=req.request_id,
            prompt=req.prompt,
            prompt_token_ids=req.prompt_token_ids,
            text=detok.emitted_text,
            token_ids=list(req.output_token_ids),
            finish_reason=req.finish_reason,
            error=req.error,
            error_is_client=req.error_is_client,
            logprobs=list(req.logprobs) if req.sampling_params.logprobs is not None else None,
            metrics=RequestMetrics(
                arrival_time=req.arrival_time,
                first_token_time=req.first_token_time,
                finish_time=req.finish_time,
                num_generated_tokens=len(req.output_token_ids),
                num_cached_tokens=req.num_cached_prompt_tokens,
            ),
            delta_text=delta_text,
            delta_token_ids=delta_tokens,
        )
        if req.is_finished:
            self.requests.pop(req.request_id, None)
            self._detok.pop(req.request_id, None)
        return out

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = dict(self.counters)
        stats.update(
            preemptions=self.scheduler.num_preemptions,
            kv_blocks_total=self.kv.num_blocks,
            kv_blocks_free=self.kv.num_free_blocks,
            kv_blocks_used=self.kv.num_blocks - self.kv.num_free_blocks,
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            dtype=str(self.dtype).removeprefix("torch."),
            isa=isa.level(),
            weight_layout=weight_layout(self.model),
            fused_kernels=self.runner.kernels is not None,
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


def _load_tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)


def _eos_token_ids(model_dir, config, tokenizer) -> frozenset[int]:
    ids: set[int] = set()

    def add(value: int | Sequence[int] | None) -> None:
        if value is None:
            return
        ids.update([value] if isinstance(value, int) else value)

    add(getattr(config, "eos_token_id", None))
    add(tokenizer.eos_token_id)
    gen_config = model_dir / "generation_config.json"
    if gen_config.is_file():
        import json

        add(json.loads(gen_config.read_text()).get("eos_token_id"))
    return frozenset(ids)

