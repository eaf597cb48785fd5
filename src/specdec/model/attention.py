"""Paged attention over a flattened ragged batch, on PyTorch SDPA.

The KV cache of one layer is a tensor ``[2, num_slots, num_kv_heads, head_dim]``
(``num_slots = num_blocks * block_size``); a token's *slot* is
``block_id * block_size + offset``. Each step first writes the new keys/values at
``slot_mapping``, then every query attends to its request's whole context
(cached tokens + the tokens of this step) gathered through the block table.

Requests are split into attention groups (built once per step by the runner):

* a *fresh prefill* (no cached context): causal SDPA on the step's own K/V,
  no gather at all;
* a *padded group* (decodes, speculative verification, chunked-prefill chunks):
  queries padded to ``[B, Q]``, context gathered to ``[B, C]`` with a boolean mask,
  one SDPA call for the whole group;
* a *kernel group* (with the fused CPU kernels: decodes, drafts, queries of up to
  16 tokens and fresh prompts of up to 256): the block tables go straight to
  ``specdec.kernels`` paged attention, no gather at all.

The cache may be stored in another dtype than the activations (``kv_cache_dtype``:
float16 under a float32 model). Attention then sees K/V as stored in the cache: what
it gathers is converted to the queries' dtype, and a fresh prefill rounds its own K/V
through the cache dtype, so a prompt's values do not depend on whether its prefill
read the cache (chunked, a prefix hit) or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F


@dataclass
class FreshPrefill:
    """One request with no cached context: tokens ``[start, end)`` of the step."""

    start: int
    end: int


@dataclass
class PaddedGroup:
    """Requests attending to gathered context, padded to a rectangle."""

    query_index: torch.Tensor  # [B, Q] flat token index per query (padding -> 0)
    query_valid: torch.Tensor  # [B, Q] bool, False on padding
    kv_slots: torch.Tensor  # [B, C] cache slot per context position (padding -> 0)
    mask: torch.Tensor | None  # [B, 1, Q, C] additive (0 / -inf) in the model dtype; None: all

    uniform_single_query: bool  # Q == 1 and no padding: query_index is a plain range


@dataclass
class KernelGroup:
    """Requests whose queries the fused paged-attention kernel reads through their
    block tables (int32): request i's queries are rows ``query_start[i]`` onwards."""

    block_tables: torch.Tensor  # [B, max_blocks]
    query_start: torch.Tensor  # [B]
    query_len: torch.Tensor  # [B]
    context_len: torch.Tensor  # [B] cached tokens + this step's tokens


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [num_tokens] cache slot each new token is written to
    groups: list[FreshPrefill | PaddedGroup | KernelGroup] = field(default_factory=list)
    kernels: Any = None  # the specdec.kernels module when the fused path runs
    block_size: int = 16
    sliding_window: int = 0  # 0: none


def write_kv(cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
    """Store this step's keys/values ``[T, Hkv, D]`` at their slots (in the cache dtype)."""
    cache[0].index_copy_(0, slots, k.to(cache.dtype))
    cache[1].index_copy_(0, slots, v.to(cache.dtype))


def paged_attention(
    q: torch.Tensor,  # [T, Hq, D]
    k: torch.Tensor,  # [T, Hkv, D] (this step's keys, already written to the cache)
    v: torch.Tensor,  # [T, Hkv, D]
    cache: torch.Tensor,  # [2, num_slots, Hkv, D]
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:  # [T, Hq, D]
    gqa = q.shape[1] != k.shape[1]
    if len(meta.groups) == 1 and isinstance(meta.groups[0], FreshPrefill):
        return _fresh(q, k, v, cache.dtype, meta.groups[0], scale, gqa)
    out = torch.empty_like(q)
    for g in meta.groups:
        if isinstance(g, FreshPrefill):
            out[g.start : g.end] = _fresh(q, k, v, cache.dtype, g, scale, gqa)
        else:
            _padded_into(out, q, cache, g, scale, gqa)
    return out


def _fresh(q, k, v, cache_dtype: torch.dtype, g: FreshPrefill, scale: float, gqa: bool):
    """Causal attention of a fresh prefill on its own K/V, as the cache stores them."""
    q, k, v = q[g.start : g.end], k[g.start : g.end], v[g.start : g.end]
    if cache_dtype != q.dtype:
        k, v = k.to(cache_dtype).to(q.dtype), v.to(cache_dtype).to(q.dtype)
    return _causal(q, k, v, scale, gqa)


def _padded_into(out, q, cache, g: PaddedGroup, scale: float, gqa: bool) -> None:
    """Gather the group's context through its slots and run one masked SDPA call."""
    batch, ctx = g.kv_slots.shape
    flat = g.kv_slots.view(-1)
    keys = _gather(cache[0], flat, q.dtype).view(batch, ctx, *cache.shape[2:]).transpose(1, 2)
    values = _gather(cache[1], flat, q.dtype).view(batch, ctx, *cache.shape[2:]).transpose(1, 2)
    if g.uniform_single_query:
        start = int(g.query_index[0, 0])
        num = g.query_index.shape[0]
        queries = q[start : start + num].unsqueeze(2)  # [B, Hq, 1, D]
        res = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=g.mask, scale=scale, enable_gqa=gqa
        )
        out[start : start + num] = res.squeeze(2)
        return
    queries = q[g.query_index].transpose(1, 2)  # [B, Hq, Q, D]
    res = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=g.mask, scale=scale, enable_gqa=gqa
    ).transpose(1, 2)  # [B, Q, Hq, D]
    out[g.query_index[g.query_valid]] = res[g.query_valid]


def fused_paged_attention(
    q: torch.Tensor,  # [T, Hq, D] rotated queries
    cache: torch.Tensor,  # [2, num_slots, Hkv, D], this step's K/V already written
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:  # [T, Hq, D]
    """Attention for the fused path: kernel groups read the cache in place; a fresh
    prefill reads its own K/V back from its slots; long chunks use the padded path."""
    gqa = q.shape[1] != cache.shape[2]
    out = torch.empty_like(q)
    for g in meta.groups:
        if isinstance(g, KernelGroup):
            meta.kernels.paged_attention(
                out, q, cache, g.block_tables, g.query_start, g.query_len, g.context_len,
                meta.block_size, scale, meta.sliding_window,
            )
        elif isinstance(g, FreshPrefill):
            slots = meta.slot_mapping[g.start : g.end]
            keys, values = _gather(cache[0], slots, q.dtype), _gather(cache[1], slots, q.dtype)
            out[g.start : g.end] = _causal(q[g.start : g.end], keys, values, scale, gqa)
        else:
            _padded_into(out, q, cache, g, scale, gqa)
    return out


def _gather(cache: torch.Tensor, slots: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The cache rows at ``slots``, in ``dtype`` (a no-op conversion where it is stored so)."""
    return cache.index_select(0, slots).to(dtype)


def _causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, gqa: bool):
    res = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0),
        k.transpose(0, 1).unsqueeze(0),
        v.transpose(0, 1).unsqueeze(0),
        is_causal=True,
        scale=scale,
        enable_gqa=gqa,
    )
    return res.squeeze(0).transpose(0, 1)
