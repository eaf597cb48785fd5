"""Draft-model proposer: a smaller (or quantized) model with its own paged KV cache.

The draft runs on the same machinery as the target (ModelRunner over a block
table in its own KVCacheManager). For each speculating request it keeps a
*shadow* request whose cache holds a prefix of the target's tokens plus the
drafts it proposed last time. Before proposing, the shadow's valid prefix is the
longest common prefix of what it cached and the target's tokens now; everything
after is recomputed (catch-up of the accepted and bonus tokens), which is also
the rollback of rejected drafts. Proposing k tokens costs one catch-up forward
that yields the first draft plus k - 1 single-token forwards, batched over all
speculating requests.

Greedy requests propose the draft argmax (q is irrelevant: acceptance is an
argmax match); sampled requests sample from the draft's processed distribution q
and hand q to the rejection sampler.
"""

from __future__ import annotations

import torch

from specdec import kernels as cpu_kernels
from specdec.core.kv_cache_manager import KVCacheManager
from specdec.core.messages import SampleOutput, ScheduledRequest, SchedulerOutput
from specdec.core.model_runner import ModelRunner
from specdec.core.request import Request
from specdec.core.scheduler import Scheduler, SchedulerConfig
from specdec.model import loader
from specdec.model.builder import build_model, load_hf_config
from specdec.model.packed_linear import pack_linears
from specdec.sample import categorical
from specdec.sample.filters import processed_probs
from specdec.speculative.config import SpeculativeConfig
from specdec.speculative.quantize import quantize_int8


class DraftModelProposer:
    def __init__(self, config: SpeculativeConfig, context) -> None:
        self.config = config
        engine_cfg = context.config
        path = engine_cfg.model if config.model in (None, "default") else config.model
        model_dir = loader.resolve_model_dir(path)
        draft_config = load_hf_config(model_dir)
        if draft_config.vocab_size != context.vocab_size:
            raise ValueError(
                f"draft model vocab size {draft_config.vocab_size} differs from the target's "
                f"{context.vocab_size}: the draft must share the target's tokenizer"
            )
        dtype = context.dtype
        model = build_model(model_dir, draft_config, context.model_registry, dtype)
        if config.draft_quantization == "int8":
            model = quantize_int8(model)
        kernels = cpu_kernels.load() if engine_cfg.fused_kernels else None
        if config.draft_quantization != "int8" and engine_cfg.fused_kernels:
            pack_linears(model, engine_cfg.max_num_seqs, kernels)
        self.model = model
        num_blocks = context.kv_cache_manager.num_blocks
        self.kv = KVCacheManager(num_blocks, engine_cfg.block_size)
        # Owns the shadows' num_computed_tokens; the proposer places their tokens itself.
        self.scheduler = Scheduler(SchedulerConfig(), self.kv)
        self.runner = ModelRunner(model, num_blocks, engine_cfg.block_size, dtype, kernels,
                                  kv_cache_dtype=context.kv_cache_dtype)
        self.generator = torch.Generator().manual_seed(engine_cfg.seed or 0)
        self._shadows: dict[str, Request] = {}

    @torch.inference_mode()
    def propose(self, wanted: list[tuple[Request, int]]) -> None:
        """Set ``draft_token_ids`` (and ``draft_probs`` when sampling) on each request."""
        active: list[tuple[Request, Request, int]] = []
        for req, k in wanted:
            shadow = self._sync_shadow(req)
            active.append((req, shadow, k))
        drafts: dict[str, list[int]] = {req.request_id: [] for req, _ in wanted}
        probs: dict[str, list[torch.Tensor]] = {req.request_id: [] for req, _ in wanted}
        for step in range(max((k for _, _, k in active), default=0)):
            running = [(r, s) for r, s, k in active if k > step]
            scheduled = []
            for _req, shadow in running:
                num_new = shadow.num_tokens - shadow.num_computed_tokens
                if self.kv.allocate_slots(shadow, num_new) is None:
                    continue  # draft pool full: this request stops proposing here
                scheduled.append(ScheduledRequest(shadow, num_new, 0,
                                                  self.kv.block_ids(shadow.request_id)))
            if not scheduled:
                break
            scheduler_output = SchedulerOutput(scheduled)
            runner_output = self.runner.execute(scheduler_output)
            self.scheduler.update(scheduler_output, SampleOutput())
            logits, rows = runner_output.logits, runner_output.rows
            row_of = {id(row.request): i for i, row in enumerate(rows)}
            for req, shadow in running:
                if id(shadow) not in row_of:
                    continue
                token, q = self._draw(logits[row_of[id(shadow)]], req)
                shadow.output_token_ids.append(token)
                drafts[req.request_id].append(token)
                if q is not None:  # sampled requests: one q per draft
                    probs[req.request_id].append(q)
            active = [(r, s, k) for r, s, k in active if id(s) in row_of]
        for req, _k in wanted:
            req.draft_token_ids = drafts[req.request_id]
            qs = probs[req.request_id]
            req.draft_probs = torch.stack(qs) if qs else None

    def _draw(self, logits: torch.Tensor, req: Request) -> tuple[int, torch.Tensor | None]:
        params = req.sampling_params
        if params.greedy:
            return int(logits.argmax()), None
        q = processed_probs(logits.unsqueeze(0), [params])[0]
        return categorical.sample(q, self.generator), q

    def _sync_shadow(self, req: Request) -> Request:
        """The shadow's valid cache = common prefix of what it holds and the target's tokens."""
        tokens = req.prompt_token_ids + req.output_token_ids
        shadow = self._shadows.get(req.request_id)
        if shadow is None:
            shadow = Request(req.request_id, None, tokens, req.sampling_params)
            self._shadows[req.request_id] = shadow
            return shadow
        cached = shadow.prompt_token_ids + shadow.output_token_ids
        valid = min(shadow.num_computed_tokens, len(tokens))
        for i in range(max(0, len(shadow.prompt_token_ids) - 1), valid):
            if cached[i] != tokens[i]:
                valid = i
                break
        shadow.prompt_token_ids = tokens
        shadow.output_token_ids = []
        self.scheduler.rewind(shadow, min(valid, len(tokens) - 1))
        return shadow

    def release(self, request: Request) -> None:
        shadow = self._shadows.pop(request.request_id, None)
        if shadow is not None:
            self.kv.free(shadow)
