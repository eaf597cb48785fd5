"""A GGUF file's quantized tensors as raw blocks, named after the model's modules.

``quantization="gguf"`` keeps a file's projection weights in the blocks llama.cpp
wrote (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K ...), run by the fused kernels' GGUF projections,
instead of the dequantized copy the loader converts the file to. Each output row of a
GGUF weight [out, in] is a run of whole blocks over ``in``, so rows can be reordered
and concatenated without touching a block: that is how llama's q/k rows are put back
in HF's order (llama.cpp's converter interleaves them for its RoPE) and how q|k|v and
gate|up are fused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from specdec.model.gguf_index import read_gguf_index

# GGUF name pieces of the decoder projections, by the fused module each feeds.
PROJECTIONS = {
    "qkv_proj": ("attn_q", "attn_k", "attn_v"),
    "o_proj": ("attn_output",),
    "gate_up_proj": ("ffn_gate", "ffn_up"),
    "down_proj": ("ffn_down",),
}
# Architectures whose converter permuted q/k rows (transformers undoes it the same way).
_PERMUTED_QK = frozenset({"llama"})
# Formats whose weights are already plain numbers: nothing to gain by keeping them.
_DENSE = frozenset({"F32", "F16", "BF16", "F64"})


@dataclass(frozen=True)
class GgufTensor:
    """One quantized weight: ``blocks`` uint8 [rows, row_bytes] in ``format``."""

    name: str
    format: str  # the ggml type name, e.g. "Q4_1"
    blocks: torch.Tensor
    in_features: int

    @property
    def rows(self) -> int:
        return self.blocks.shape[0]


@dataclass
class GgufWeights:
    """The quantized tensors of one file, by GGUF name (dense ones are left out)."""

    architecture: str
    tensors: dict[str, GgufTensor]

    def layer_parts(self, layer: int, module: str) -> list[GgufTensor] | None:
        """The parts of layer ``layer``'s fused projection ``module`` (a key of
        PROJECTIONS) in output order, or None where one of them is not quantized."""
        parts = [self.tensors.get(f"blk.{layer}.{piece}.weight") for piece in PROJECTIONS[module]]
        return None if any(p is None for p in parts) else parts

    def formats(self) -> set[str]:
        return {t.format for t in self.tensors.values()}


def read_gguf_weights(path: Path, num_heads: int, num_kv_heads: int) -> GgufWeights:
    """The quantized tensors of the GGUF file at ``path``, memory-mapped no longer:
    each is copied out once (the file may be replaced while the engine runs)."""
    index = read_gguf_index(path)
    architecture = str(index.metadata.get("general.architecture", ""))
    tensors = {}
    for t in index.tensors:
        fmt = t.type_name
        if fmt in _DENSE or len(t.dims) != 2:
            continue
        raw = t.data.reshape(t.dims[1], -1)
        if architecture in _PERMUTED_QK and ".attn_q." in t.name:
            raw = unpermute_rows(raw, num_heads)
        elif architecture in _PERMUTED_QK and ".attn_k." in t.name:
            raw = unpermute_rows(raw, num_kv_heads)
        tensors[t.name] = GgufTensor(t.name, fmt, torch.from_numpy(raw.copy()), t.dims[0])
    return GgufWeights(architecture, tensors)


def unpermute_rows(rows: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row interleave: rows (head, i, pair) -> (head, pair, i),
    as transformers' ``_reverse_permute_weights`` does to the dequantized weight."""
    half = rows.shape[0] // heads // 2
    return rows.reshape(heads, half, 2, -1).swapaxes(1, 2).reshape(rows.shape)
