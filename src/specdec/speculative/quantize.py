"""Weight-only int8 quantization of a model's linear layers, for cheap draft models.

Per-output-channel symmetric scales; the matmul runs on PyTorch's CPU int8-weight
kernel (``aten._weight_int8pack_mm``), which streams a quarter of the fp32 bytes
(half of bf16) per decode step.
"""

from __future__ import annotations

import torch
from torch import nn


class Int8Linear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype):
        super().__init__()
        w = weight.detach().float()
        scales = w.abs().amax(dim=1).clamp_min(1e-8) / 127.0
        self.register_buffer("weight_int8", torch.round(w / scales[:, None]).to(torch.int8))
        self.register_buffer("scales", scales.to(dtype))
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(dtype), False)
        self.out_features, self.in_features = weight.shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features).to(self.scales.dtype)
        y = torch.ops.aten._weight_int8pack_mm(flat, self.weight_int8, self.scales)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features).to(x.dtype)


class TiedInt8Head(nn.Module):
    """An int8 copy of a tied embedding matrix used as the LM head."""

    def __init__(self, embedding: torch.Tensor, dtype: torch.dtype):
        super().__init__()
        self.linear = Int8Linear(embedding, None, dtype)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden)


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear (and a tied LM head) by an int8 weight-only version."""
    dtype = next(model.parameters()).dtype
    kernel_dtype = torch.bfloat16 if dtype == torch.float32 else dtype
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, child_name, Int8Linear(child.weight, child.bias, kernel_dtype))
    if getattr(model, "tie_word_embeddings", False):
        model.lm_head = TiedInt8Head(model.embed_tokens.weight, kernel_dtype)
        model.tie_word_embeddings = False
    return model
