"""Packed token bitmasks: bit ``i % 32`` of word ``i // 32`` set = token ``i`` allowed.

The packed int32 layout (the one xgrammar and vLLM use) keeps a whole batch's mask
small (49152 tokens = 1536 words per row) so masks are cached and copied cheaply; one
``masked_fill_`` applies the batch's mask to the logits.
"""

from __future__ import annotations

import numpy as np
import torch

_BIT_VALUES = torch.tensor([1 << i for i in range(31)] + [-(1 << 31)], dtype=torch.int32)


def num_words(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> torch.Tensor:
    """An all-allowed int32 bitmask ``[batch_size, ceil(vocab_size / 32)]``."""
    return torch.full((batch_size, num_words(vocab_size)), -1, dtype=torch.int32)


def pack_bool_mask(allowed: np.ndarray) -> np.ndarray:
    """bool ``[vocab]`` -> int32 ``[ceil(vocab / 32)]`` in the packed layout."""
    padded = np.zeros(num_words(allowed.shape[0]) * 32, dtype=bool)
    padded[: allowed.shape[0]] = allowed
    return np.packbits(padded, bitorder="little").view(np.int32)


def pack_token_ids(token_ids, vocab_size: int) -> np.ndarray:
    allowed = np.zeros(vocab_size, dtype=bool)
    allowed[np.asarray(list(token_ids), dtype=np.int64)] = True
    return pack_bool_mask(allowed)


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int32 ``[..., words]`` -> bool ``[..., vocab_size]`` (True = allowed)."""
    bits = (bitmask.unsqueeze(-1) & _BIT_VALUES) != 0
    return bits.flatten(-2)[..., :vocab_size]


def apply_token_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set disallowed logits to ``-inf`` in place, for the whole batch in one op.

    logits: float ``[batch, vocab]``; bitmask: int32 ``[batch, words]`` (rows all -1 are
    left untouched). Columns past the mask's width are disallowed.
    """
    vocab = logits.shape[-1]
    allowed = unpack_bitmask(bitmask, min(vocab, bitmask.shape[-1] * 32))
    if allowed.shape[-1] < vocab:
        pad = torch.zeros(*allowed.shape[:-1], vocab - allowed.shape[-1], dtype=torch.bool)
        allowed = torch.cat([allowed, pad], dim=-1)
    logits.masked_fill_(~allowed.to(logits.device), float("-inf"))
