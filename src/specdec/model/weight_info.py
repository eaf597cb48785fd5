"""How a model's weights are held, for ``LLM.stats()`` and the benchmarks' headers."""

from __future__ import annotations

import torch
from torch import nn

from specdec.model.packed_linear import InvariantLinear, PackedLinear, TileLinear
from specdec.model.quant_linear import GgufEmbedding, GgufLinear


def weight_layout(model: nn.Module) -> str:
    """The projection weights' layouts: "amx-tiles" (with a oneDNN copy for long
    prompts), "amx-tiles-invariant" (tiles alone), "onednn-packed", "bf16-invariant",
    "gguf-Q4_1" (per GGUF format), "int8" or "plain"."""
    kinds = set()
    for module in model.modules():
        if type(module) is PackedLinear:
            kinds.add("amx-tiles" if module.tiles is not None else "onednn-packed")
        elif type(module) is InvariantLinear:
            kinds.add("bf16-invariant")
        elif type(module) is TileLinear:
            kinds.add("amx-tiles-invariant")
        elif type(module) is GgufLinear:
            kinds.update(f"gguf-{fmt}" for fmt in module.formats)
        elif isinstance(getattr(module, "weight_int8", None), torch.Tensor):
            kinds.add("int8")
        elif type(module) is nn.Linear:
            kinds.add("plain")
    return "+".join(sorted(kinds)) or "plain"


def has_nontemporal_projections(model: nn.Module) -> bool:
    """Whether any projection's kernel loads its weights with the non-temporal hint
    (``kernels/nontemporal.h``) when the hint is on: they say so themselves."""
    return any(getattr(module, "nontemporal_loads", False) for module in model.modules())


def resident_weight_bytes(model: nn.Module) -> int:
    """Bytes the model's weights occupy: every parameter and buffer once (shared ones
    once), GGUF projections as their kernels hold them, and both copies of a packed
    projection (oneDNN's and the AMX tiles)."""
    seen: set[int] = set()
    total = 0

    def add(t: torch.Tensor | None) -> None:
        nonlocal total
        if t is None or t.is_meta:
            return
        key = t.untyped_storage().data_ptr() if not t.is_mkldnn else id(t)
        if key in seen:
            return
        seen.add(key)
        total += t.numel() * t.element_size()

    for module in model.modules():
        if type(module) is GgufLinear:
            total += int(module.projection.nbytes)  # its bias is a parameter, counted below
        elif type(module) is PackedLinear:
            add(module.packed)
            add(module.tiles)
        elif type(module) is InvariantLinear:
            add(module.packed)
        elif type(module) is TileLinear:
            add(module.tiles)
        elif type(module) is GgufEmbedding:
            add(module.blocks)
    for tensor in [*model.parameters(), *model.buffers()]:
        add(tensor)
    return total


def streamed_weight_bytes(model: nn.Module) -> int:
    """Bytes one decode step reads from weights: every projection (and the LM head) in
    the layout a single row runs on. Embedding rows and norms are not counted."""
    total = 0
    for module in model.modules():
        if type(module) is GgufLinear:
            total += module.nbytes
        elif type(module) in (PackedLinear, InvariantLinear, TileLinear):
            total += module.in_features * module.out_features * 2  # bf16, any layout
        elif isinstance(getattr(module, "weight_int8", None), torch.Tensor):
            scales = module.scales
            total += module.weight_int8.numel() + scales.numel() * scales.element_size()
        elif type(module) is nn.Linear:
            total += module.weight.numel() * module.weight.element_size()
    if getattr(model, "tie_word_embeddings", False):
        weight = model.embed_tokens.weight
        total += weight.numel() * weight.element_size()
    return total


def is_projection(module: nn.Module) -> bool:
    """Whether ``module`` is one of the projection kinds ``weight_layout`` names."""
    return (type(module) in (PackedLinear, InvariantLinear, TileLinear, GgufLinear, nn.Linear)
            or isinstance(getattr(module, "weight_int8", None), torch.Tensor))


def projections_batch_invariant(model: nn.Module) -> bool:
    """Whether every projection (LM head included) computes each row the same way
    whatever else is in the batch: the projection classes say so themselves
    (``batch_invariant``: GGUF blocks, the bf16-invariant kernel, the AMX tiles alone)."""
    projections = [m for m in model.modules() if is_projection(m)]
    tied_head = getattr(model, "tie_word_embeddings", False)  # F.linear on the embedding
    return (not tied_head and bool(projections)
            and all(getattr(m, "batch_invariant", False) for m in projections))
