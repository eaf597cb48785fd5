"""A projection module (``nn.Linear``, ``PackedLinear``, ``InvariantLinear``,
``TileLinear``, ``GgufLinear``, an int8 weight-only module, or any other) run from
Python, or described to the fused kernels as a ``Projection`` whose kind names the
matmul that runs it (``layer_weights.h``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specdec.model import packed_linear
from specdec.model.packed_linear import InvariantLinear, PackedLinear, TileLinear
from specdec.model.quant_linear import GgufLinear


def project(module: nn.Module, x: torch.Tensor, out_float: bool = False) -> torch.Tensor:
    """A projection without nn.Module call overhead (quantised modules keep theirs).
    ``out_float``: the result (rounded in the model dtype) as float32; the AMX tiles, the
    batch-invariant and the GGUF kernels write it so directly, with no ``.float()`` pass."""
    kind = type(module)
    if kind is TileLinear or (kind is PackedLinear and x.shape[0] <= module.tile_rows):
        return module.kernels.tile_linear(x, module.tiles, module.bias, out_float=out_float)
    if kind is InvariantLinear:
        return module.kernels.bf16_invariant_linear(x, module.packed, module.bias,
                                                    out_float=out_float)
    if kind is nn.Linear:
        y = F.linear(x, module.weight, module.bias)
    elif kind is PackedLinear:
        y = packed_linear._linear_pointwise(x, module.packed, module.bias, "none", [], "")
    elif kind is GgufLinear:  # the kernel writes float32 itself
        return module.kernels.project(x, module.projection, out_float)
    else:
        y = module(x)
    return y.float() if out_float else y


def kernel_projection(kernels, module: nn.Module):
    """``module`` as the fused kernels' ``Projection``: its weight in the layout its own
    forward uses, so the C++ matmul gives the same result. A module of a kind the
    kernels do not know is called back through Python."""
    kind = type(module)
    if kind is nn.Linear:
        return kernels.Projection.plain(module.weight, module.bias)
    if kind is PackedLinear:
        if module.tiles is not None:
            return kernels.Projection.amx_tiles(module.tiles, module.packed, module.bias)
        return kernels.Projection.onednn(module.packed, module.bias)
    if kind is TileLinear:
        return kernels.Projection.amx_tiles(module.tiles, None, module.bias)
    if kind is InvariantLinear:
        return kernels.Projection.bf16_invariant(module.packed, module.bias)
    if kind is GgufLinear:
        return module.projection
    if isinstance(getattr(module, "weight_int8", None), torch.Tensor):
        return kernels.Projection.int8(module.weight_int8, module.scales, module.bias)
    return kernels.Projection.module(module)
