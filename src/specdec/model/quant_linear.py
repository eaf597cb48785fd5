"""Projections and embeddings whose weights stay in a GGUF file's quantized blocks.

``GgufLinear`` runs y = x W^T on the fused kernels' GGUF projection (``quant_linear.h``):
activations quantized per 32 to int8, integer dot products against the blocks, float32
accumulation, one rounding to x's dtype. Each output row is computed the same way
whatever the number of rows in the call, so outputs do not depend on the batch.
``GgufEmbedding`` dequantizes only the rows it looks up (Q8_0, Q4_0, Q4_1), bit for bit
as the dequantized model's embedding would hold them.

``apply_gguf`` swaps a loaded model's projections (and its embedding and LM head) for
these, freeing the dense copies; what the kernels cannot run stays dense.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from specdec.model.gguf_weights import PROJECTIONS, GgufTensor, GgufWeights

# Bytes per block and elements per block of the formats GgufEmbedding dequantizes.
_EMBEDDING_BLOCKS = {"Q8_0": (34, 32), "Q4_0": (18, 32), "Q4_1": (20, 32)}


class GgufLinear(nn.Module):
    """A projection over GGUF blocks: ``parts`` are fused in output order (q|k|v)."""

    # quant_linear.h loads the blocks with the non-temporal hint when it is on
    nontemporal_loads = True
    # each output row is reduced in one order whatever the rows beside it
    batch_invariant = True

    def __init__(self, parts: list[GgufTensor], bias: torch.Tensor | None, kernels):
        super().__init__()
        self.kernels = kernels
        self.formats = tuple(p.format for p in parts)
        self.bias = None if bias is None else nn.Parameter(bias.detach().float(), False)
        self.projection = kernels.Projection.gguf([(p.format, p.blocks) for p in parts],
                                                  self.bias)
        self.out_features = self.projection.out_features
        self.in_features = self.projection.in_features

    @property
    def nbytes(self) -> int:
        """Resident bytes of the weight (as the kernels hold it) and the bias."""
        bias = 0 if self.bias is None else self.bias.numel() * 4
        return int(self.projection.nbytes) + bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = self.kernels.project(x.reshape(-1, self.in_features), self.projection)
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"gguf={'|'.join(self.formats)}")


class GgufEmbedding(nn.Module):
    """Token embeddings looked up from quantized rows, returned in ``dtype``: by the fused
    kernels' ``gguf_embedding`` where given, else by ``dequantize_blocks`` (same values)."""

    def __init__(self, tensor: GgufTensor, dtype: torch.dtype, kernels=None):
        super().__init__()
        block_bytes, block_elems = _EMBEDDING_BLOCKS[tensor.format]
        self.format, self.dtype, self.kernels = tensor.format, dtype, kernels
        self.embedding_dim = tensor.in_features
        self.num_embeddings = tensor.rows
        self.register_buffer("blocks", tensor.blocks.view(
            tensor.rows, tensor.in_features // block_elems, block_bytes), persistent=False)

    @property
    def nbytes(self) -> int:
        return self.blocks.numel()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.kernels is not None:
            return self.kernels.gguf_embedding(self.blocks, ids, self.format, self.dtype)
        rows = dequantize_blocks(self.format, self.blocks[ids.reshape(-1)])
        return rows.reshape(*ids.shape, self.embedding_dim).to(self.dtype)


def dequantize_blocks(fmt: str, blocks: torch.Tensor) -> torch.Tensor:
    """[..., nblocks, block_bytes] uint8 -> float32 [..., nblocks * 32], the same float32
    operations as gguf-py's ``dequantize`` (so equal to the converted model's weights)."""
    d = blocks[..., :2].contiguous().view(torch.float16).float()
    if fmt == "Q8_0":
        q = blocks[..., 2:].contiguous().view(torch.int8).float()
        return (d * q).flatten(-2)
    offset = 4 if fmt == "Q4_1" else 2
    packed = blocks[..., offset:]
    q = torch.cat((packed & 0x0F, packed >> 4), dim=-1).float()  # elements j, j + 16
    if fmt == "Q4_1":
        m = blocks[..., 2:4].contiguous().view(torch.float16).float()
        return (d * q + m).flatten(-2)
    return (d * (q - 8)).flatten(-2)


def apply_gguf(model: nn.Module, weights: GgufWeights, kernels) -> list[str]:
    """Replace ``model``'s projections, LM head and embedding by GGUF-backed modules where
    the kernels run their formats; returns what stays dense (for the log)."""
    supported = set(kernels.gguf_formats())
    dense: list[str] = []
    for index, layer in enumerate(model.layers):
        owners = {"qkv_proj": layer.self_attn, "o_proj": layer.self_attn,
                  "gate_up_proj": layer.mlp, "down_proj": layer.mlp}
        for name in PROJECTIONS:
            parts = weights.layer_parts(index, name)
            if parts is None or any(p.format not in supported for p in parts):
                dense.append(f"layers.{index}.{name}")
                continue
            old = getattr(owners[name], name)
            setattr(owners[name], name, GgufLinear(parts, old.bias, kernels))
    head = weights.tensors.get("output.weight")
    embedding = weights.tensors.get("token_embd.weight")
    tied = getattr(model, "tie_word_embeddings", False)
    if tied and head is None:
        head = embedding
    if head is not None and head.format in supported and (tied or hasattr(model, "lm_head")):
        model.lm_head = GgufLinear([head], None, kernels)
        model.tie_word_embeddings = False
    elif head is not None:
        dense.append("lm_head")
    if embedding is not None and embedding.format in _EMBEDDING_BLOCKS:
        dtype = model.embed_tokens.weight.dtype
        model.embed_tokens = GgufEmbedding(embedding, dtype, kernels)
    return dense


def log_dense(dense: list[str]) -> None:
    if dense:
        shown = ", ".join(dense[:4]) + (" ..." if len(dense) > 4 else "")
        print(f"specdec: quantization='gguf': {len(dense)} projections stay dense "
              f"(formats the kernels do not run): {shown}", file=sys.stderr, flush=True)
