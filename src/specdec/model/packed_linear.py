"""bfloat16 projections with their weights pre-packed in oneDNN's blocked layout.

A plain ``F.linear`` on CPU re-packs the weight into the AMX/AVX-512 tile layout on
every call; for decode-sized batches that repacking is most of the matmul's time
(measured: all SmolLM2 projections at batch 1 take 22.7 ms with ``F.linear`` and
14.6 ms pre-packed; at batch 64, 33.4 and 20.8 ms). Results are the same oneDNN
matmul, bit-identical in the tests. Only for bfloat16: float32 keeps MKL's sgemm,
whose rounding the HF-identity tests rely on.
"""

from __future__ import annotations

import torch
from torch import nn

_linear_pointwise = None


def available() -> bool:
    global _linear_pointwise
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        _linear_pointwise = torch.ops.mkldnn._linear_pointwise
        torch.ops.mkldnn._reorder_linear_weight  # noqa: B018 - probe that the op exists
    except (AttributeError, RuntimeError):
        return False
    return True


class PackedLinear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, batch_hint: int):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), batch_hint)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed"


def pack_linears(model: nn.Module, batch_hint: int) -> bool:
    """Replace the bf16 nn.Linear layers (and a tied LM head) by packed ones, in place,
    and build their matmul primitives for 1 .. ``batch_hint`` rows (see ``warm_up``).
    Returns False, changing nothing, where the model is not bf16 or oneDNN is missing."""
    if next(model.parameters()).dtype != torch.bfloat16 or not available():
        return False
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, PackedLinear(child.weight, child.bias, batch_hint))
    if getattr(model, "tie_word_embeddings", False):
        model.lm_head = PackedLinear(model.embed_tokens.weight, None, batch_hint)
        model.tie_word_embeddings = False
    warm_up(model, batch_hint)
    return True


def warm_up(model: nn.Module, max_rows: int) -> None:
    """Run each distinct packed shape once for every row count up to ``max_rows``.

    oneDNN builds (JIT-compiles) a matmul primitive on the first call for each
    (rows, in, out) shape, ~1 ms each, and caches it by shape. Without this, every
    decode step whose batch size is new pays that for each of the model's five
    projection shapes (measured ~5 ms per such step at batch ~60).
    """
    shapes = {}
    for module in model.modules():
        if type(module) is PackedLinear:
            shapes.setdefault((module.in_features, module.out_features), module)
    with torch.inference_mode():
        for module in shapes.values():
            x = torch.zeros(max_rows, module.in_features, dtype=torch.bfloat16)
            for rows in range(1, max_rows + 1):
                module(x[:rows])
