"""Turns a SchedulerOutput into one forward over a flattened ragged batch.

Flat inputs (token ids, positions, slot mapping) are built as Python lists and
turned into tensors once; per-request context gathering is vectorised over the
block tables. Only rows that sample go through the LM head.
"""

from __future__ import annotations

import torch

from specdec.core import kv_prefault
from specdec.core.kv_cache_manager import cdiv
from specdec.core.messages import LogitsRow, RunnerOutput, ScheduledRequest, SchedulerOutput
from specdec.model.attention import AttentionMetadata, FreshPrefill, KernelGroup, PaddedGroup

SHORT_QUERY = 32  # queries up to this long share one padded attention call
# With the fused kernels, paged attention takes decodes, drafts and queries up to
# KERNEL_QUERY tokens over cached context, and fresh prompts up to KERNEL_PROMPT
# tokens; longer queries over long contexts are matmul-shaped and go to SDPA.
KERNEL_QUERY = 16
KERNEL_PROMPT = 256


class ModelRunner:
    """``invariant_attention``: with the fused kernels, every query (any length, fresh
    or over cached context) goes to the paged-attention kernel, whose result for a
    query row does not depend on the other rows: with batch-invariant projections, a
    prompt's output is then the same alone, batched, chunked or after a cache hit.
    Otherwise long queries take SDPA (faster in float32 from ~1k tokens).

    ``dtype`` is the activations' (masks are built in it); the caches are stored in
    ``kv_cache_dtype`` (None: the same), e.g. float16 under a float32 model."""

    def __init__(self, model, num_blocks: int, block_size: int, dtype: torch.dtype,
                 kernels=None, invariant_attention: bool = False,
                 kv_cache_dtype: torch.dtype | None = None):
        self.model = model
        self.invariant_attention = invariant_attention
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.dtype = dtype
        self.kv_cache_dtype = kv_cache_dtype or dtype
        self.sliding_window = getattr(model.config, "sliding_window", None) or None
        fusable = (
            kernels is not None
            and getattr(model, "supports_fused_kernels", False)
            and dtype in (torch.float32, torch.bfloat16)
            and kernels.supports_head_dim(model.head_dim)
        )
        self.kernels = kernels if fusable else None  # specdec.kernels module, or eager
        self._sampled_hidden = torch.empty(0)
        shape = (2, num_blocks * block_size, model.num_kv_heads, model.head_dim)
        # The caches' pages, faulted in on a thread of their own in idle time.
        self.kv_prefault: kv_prefault.KvPrefault | None = None
        if self.kernels is not None:  # 2 MB pages: attention streams each layer's cache
            zeros = self.kernels.huge_page_zeros
            self.kv_caches = [zeros(list(shape), self.kv_cache_dtype) for _ in model.layers]
            if kv_prefault.enabled_by_env():
                self.kv_prefault = kv_prefault.KvPrefault(self.kernels, self.kv_caches, num_blocks)
        else:  # zero-filled: every page is in already
            self.kv_caches = [torch.zeros(shape, dtype=self.kv_cache_dtype)
                              for _ in model.layers]

    def kv_blocks_prefaulted(self) -> int:
        """Blocks whose pages are in ahead of their first write: all of the eager path's
        zero-filled caches; the fused path's as far as its worker got (none without)."""
        if self.kernels is None:
            return self.num_blocks
        return self.kv_prefault.done if self.kv_prefault is not None else 0

    @staticmethod
    def kv_bytes_per_block(config, block_size: int, cache_dtype: torch.dtype) -> int:
        from specdec.model.llama import head_dim_of

        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        per_token = 2 * kv_heads * head_dim_of(config) * config.num_hidden_layers
        return per_token * block_size * cache_dtype.itemsize

    @torch.inference_mode()
    def execute(self, sched: SchedulerOutput) -> RunnerOutput:
        # Single-token steps first, contiguous, so they attend as one group.
        order = sorted(sched.scheduled, key=lambda s: s.num_tokens != 1 or s.start == 0)
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        sample_index: list[int] = []
        rows: list[LogitsRow] = []
        bs = self.block_size
        for s in order:
            start, end = s.start, s.start + s.num_tokens
            input_ids += s.request.tokens_slice(start, end)
            positions += range(start, end)
            table = s.block_ids
            slots += [table[p // bs] * bs + p % bs for p in range(start, end)]
            if s.samples:
                self._add_rows(s, len(input_ids), sample_index, rows)
        # One tensor for the three flat inputs (each ``torch.tensor`` call costs ~10 µs).
        ids, pos, slot_mapping = torch.tensor([input_ids, positions, slots], dtype=torch.long)
        meta = AttentionMetadata(
            slot_mapping=slot_mapping,
            groups=self._attention_groups(order),
            kernels=self.kernels,
            block_size=bs,
            sliding_window=self.sliding_window or 0,
        )
        hidden = self.model(ids, pos, self.kv_caches, meta)
        if not rows:
            return RunnerOutput(torch.empty(0, 0), rows)
        if len(sample_index) == hidden.shape[0]:
            self._sampled_hidden = hidden
        else:
            self._sampled_hidden = hidden[torch.tensor(sample_index, dtype=torch.long)]
        return RunnerOutput(self.model.compute_logits(self._sampled_hidden), rows)

    @torch.inference_mode()
    def recompute_logits(self) -> torch.Tensor:
        """The last step's logits again, as the model produced them (before plugins)."""
        return self.model.compute_logits(self._sampled_hidden)

    @staticmethod
    def _add_rows(s: ScheduledRequest, flat_end: int, index: list[int], rows: list) -> None:
        req = s.request
        drafts = req.draft_token_ids[: s.num_draft_tokens]
        first = flat_end - len(drafts) - 1
        for j in range(len(drafts) + 1):
            index.append(first + j)
            rows.append(
                LogitsRow(
                    request=req,
                    position=len(req.output_token_ids) + j,
                    draft_tokens_before=drafts[:j],
                    draft_token=drafts[j] if j < len(drafts) else None,
                    draft_probs=(
                        req.draft_probs[j]
                        if req.draft_probs is not None and j < len(drafts) else None
                    ),
                )
            )

    def _attention_groups(self, order: list[ScheduledRequest]):
        """Decodes batch together; short queries (drafts, short prompts) batch together;
        a long fresh prompt runs causal attention alone and a long chunk gets its own
        padded group, so no decode is padded to a long prompt's length. With the fused
        kernels, decodes, drafts and short prompts form one kernel group instead."""
        groups: list = []
        kernel: list[tuple[int, ScheduledRequest]] = []
        singles: list[tuple[int, ScheduledRequest]] = []
        short: list[tuple[int, ScheduledRequest]] = []
        offset = 0
        for s in order:
            member = (offset, s)
            offset += s.num_tokens
            fits_window = self.sliding_window is None or s.num_tokens <= self.sliding_window
            if self.kernels is not None and (self.invariant_attention or s.num_tokens <= (
                KERNEL_PROMPT if s.start == 0 else KERNEL_QUERY
            )):
                kernel.append(member)
            elif s.num_tokens == 1 and s.start > 0:
                singles.append(member)
            elif s.num_tokens <= SHORT_QUERY:
                short.append(member)
            elif s.start == 0 and fits_window:
                groups.append(FreshPrefill(member[0], member[0] + s.num_tokens))
            else:
                groups.append(self._padded_group([member]))
        if kernel:
            groups.append(self._kernel_group(kernel))
        for members in (singles, short):
            if len(members) == 1 and members[0][1].start == 0:
                off, s = members[0]
                groups.append(FreshPrefill(off, off + s.num_tokens))
            elif members:
                groups.append(self._padded_group(members))
        return groups

    def _kernel_group(self, members: list[tuple[int, ScheduledRequest]]) -> KernelGroup:
        bs = self.block_size
        context = [s.start + s.num_tokens for _, s in members]
        needed = [cdiv(c, bs) for c in context]
        width = max(needed)
        tables = [
            s.block_ids[:n] + [0] * (width - n)
            for (_, s), n in zip(members, needed, strict=True)
        ]
        starts, lens, context_len = torch.tensor(
            [[off for off, _ in members], [s.num_tokens for _, s in members], context],
            dtype=torch.int32,
        )
        return KernelGroup(
            block_tables=torch.tensor(tables, dtype=torch.int32),
            query_start=starts,
            query_len=lens,
            context_len=context_len,
        )

    def _padded_group(self, members: list[tuple[int, ScheduledRequest]]) -> PaddedGroup:
        bs = self.block_size
        q_lens = torch.tensor([s.num_tokens for _, s in members])
        ctx_lens = torch.tensor([s.start + s.num_tokens for _, s in members])
        q_starts = torch.tensor([off for off, _ in members])
        max_q, max_ctx = int(q_lens.max()), int(ctx_lens.max())
        num_blocks = cdiv(max_ctx, bs)
        table = torch.zeros(len(members), num_blocks, dtype=torch.long)
        for i, (_, s) in enumerate(members):
            ids = s.block_ids[:num_blocks]
            table[i, : len(ids)] = torch.tensor(ids)
        pos = torch.arange(max_ctx)
        kv_slots = table[:, pos // bs] * bs + pos % bs  # [B, C]
        j = torch.arange(max_q)
        q_valid = j[None, :] < q_lens[:, None]  # [B, Q]
        q_pos = (ctx_lens - q_lens)[:, None] + j[None, :]  # [B, Q]
        mask = pos[None, None, :] <= q_pos[:, :, None]  # [B, Q, C]
        if self.sliding_window is not None:
            mask &= pos[None, None, :] > q_pos[:, :, None] - self.sliding_window
        mask &= q_valid[:, :, None]
        mask[:, :, 0] |= ~q_valid  # padding queries attend somewhere (no NaN rows)
        query_index = torch.where(q_valid, q_starts[:, None] + j[None, :], 0)
        uniform = max_q == 1 and bool(
            torch.equal(q_starts, q_starts[0] + torch.arange(len(members)))
        )
        # Additive mask in the model dtype, built once per step rather than per layer.
        bias = None
        if not bool(mask.all()):
            bias = torch.zeros(mask.shape, dtype=self.dtype).masked_fill_(~mask, float("-inf"))
            bias = bias.unsqueeze(1)
        return PaddedGroup(query_index, q_valid, kv_slots, bias, uniform)
