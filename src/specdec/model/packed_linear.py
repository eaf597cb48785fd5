"""bfloat16 projections with their weights pre-packed in oneDNN's blocked layout.

A plain ``F.linear`` on CPU re-packs the weight into the AMX/AVX-512 tile layout on
every call; for decode-sized batches that repacking is most of the matmul's time
(measured: all SmolLM2 projections at batch 1 take 22.7 ms with ``F.linear`` and
14.6 ms pre-packed; at batch 64, 33.4 and 20.8 ms). Results are the same oneDNN
matmul, bit-identical in the tests. Only for bfloat16: float32 keeps MKL's sgemm,
whose rounding the HF-identity tests rely on.

On CPUs with AMX tiles the fused kernels' ``tile_linear`` serves batches of up to
512 rows (decode steps, verifications, short prompts) from a second copy of the
weight in its tile layout: it streams the weight once per call and beats oneDNN's
matmul there (all SmolLM2 projections at 64 rows: ~1.16x more offline throughput).
Longer prompts keep oneDNN, which wins at 2048 rows. The price is a second copy of
the projection weights in memory.

oneDNN's result for a row depends on how many rows are in the call (its blocking
changes with them), so a prompt's output changes with its batch, chunking and
speculation. On AVX-512 CPUs without AMX tiles the projections run the fused kernels'
``bf16_invariant_linear`` instead (``InvariantLinear``, one copy of the weight): every
row gets the same arithmetic whatever runs beside it, and it is also the faster matmul
there (Zen 5, SmolLM2's shapes: 0.34-0.62x oneDNN's time at 1 row, 0.54-0.78x at 8,
0.88-0.96x at 64, 0.97-1.08x at 256 and 1024 rows; a decode token 8.1 instead of
17.9 ms). On CPUs with AMX tiles, ``batch_invariant=True`` makes the projections
``TileLinear``: ``tile_linear`` for every row count (its reduction over ``in`` runs in
one order per row, whatever the rows beside it), the weight held once, in the tile
layout. Not the default: every query then takes the paged attention, which on AMX is
slower than SDPA for long prompts (docs/cpu.md, "Batch invariance").
"""

from __future__ import annotations

import functools
import sys

import torch
from torch import nn

from specdec import isa

_linear_pointwise = None


@functools.cache
def available() -> bool:
    """Whether oneDNN can pre-pack and run bf16 projections here: from the avx512 level
    up (oneDNN's bf16 path needs AVX512-BW/VL/DQ or AVX-NE-CONVERT), and a tiny trial
    pack and matmul succeeds. Decided once; a failed trial says so on stderr."""
    global _linear_pointwise
    if not torch.backends.mkldnn.is_available():
        return False
    if isa.is_x86() and not (isa.at_least("avx512") or "avx_ne_convert" in isa.cpu_flags()):
        return False
    try:
        op = torch.ops.mkldnn._linear_pointwise
        weight = torch.ones(32, 32, dtype=torch.bfloat16)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 2)
        result = op(torch.ones(2, 32, dtype=torch.bfloat16), packed, None, "none", [], "")
        if not bool((result == 32).all()):
            raise RuntimeError("wrong result from the trial matmul")
    except (AttributeError, RuntimeError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"specdec: oneDNN pre-packed bf16 weights unavailable ({message}); "
              "bf16 projections use the plain torch matmul", file=sys.stderr, flush=True)
        return False
    _linear_pointwise = op
    return True


class PackedLinear(nn.Module):
    """A bf16 projection with its weight pre-packed for oneDNN and, where the fused
    kernels have AMX projections and the shape suits them (``tiles``), also for
    ``kernels.tile_linear``, which serves up to ``tile_linear_max_rows()`` rows."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, batch_hint: int,
                 kernels=None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), batch_hint)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self.kernels = kernels if _tiles_fit(kernels, weight) else None
        self.tiles = None if self.kernels is None else kernels.pack_tile_weight(
            weight.detach().contiguous())
        self.tile_rows = 0 if self.kernels is None else kernels.tile_linear_max_rows()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] <= self.tile_rows:
            return self.kernels.tile_linear(x, self.tiles, self.bias)
        return _linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        tiles = ", AMX tiles" if self.tiles is not None else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, packed{tiles}"


class _RowKernelLinear(nn.Module):
    """A bf16 projection run by one fused kernel at every row count: each output row
    bit-identical whatever the batch, the weight held once, in that kernel's layout.
    Subclasses pack the weight and name the kernel (``_matmul`` of x [T, in])."""

    batch_invariant = True  # weight_info.projections_batch_invariant reads it

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, kernels):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.kernels = kernels
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self._matmul(x.reshape(-1, self.in_features))
        return y.reshape(*x.shape[:-1], self.out_features)


class InvariantLinear(_RowKernelLinear):
    """Run by ``kernels.bf16_invariant_linear`` (AVX-512)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, kernels):
        super().__init__(weight, bias, kernels)
        self.packed = kernels.pack_bf16_invariant(weight.detach().contiguous())

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernels.bf16_invariant_linear(x, self.packed, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, batch-invariant"


class TileLinear(_RowKernelLinear):
    """Run by ``kernels.tile_linear`` (AMX tiles) at every row count."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, kernels):
        super().__init__(weight, bias, kernels)
        self.tiles = kernels.pack_tile_weight(weight.detach().contiguous())

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernels.tile_linear(x, self.tiles, self.bias, False)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                "AMX tiles, batch-invariant")


def _invariant_fits(weight: torch.Tensor) -> bool:
    return weight.shape[1] % 2 == 0  # the kernel reads k in pairs


def invariant_available(kernels) -> bool:
    """Whether ``pack_linears`` takes the invariant kernel here: the kernels have it
    (AVX-512 builds) and no AMX tiles serve the projections."""
    return (kernels is not None and getattr(kernels, "has_bf16_invariant", lambda: False)()
            and not kernels.has_tile_linear())


def _tiles_fit(kernels, weight: torch.Tensor) -> bool:
    return (kernels is not None and kernels.has_tile_linear()
            and weight.shape[0] % 32 == 0 and weight.shape[1] % 32 == 0)


def pack_linears(model: nn.Module, batch_hint: int, kernels=None,
                 batch_invariant: bool = False) -> bool:
    """Replace the bf16 nn.Linear layers (and a tied LM head) by packed ones, in place,
    and build their matmul primitives for 1 .. ``batch_hint`` rows (see ``warm_up``).
    With ``kernels`` (the fused kernels module) on a CPU with AMX, the projections
    also get ``tile_linear``'s layout. Where ``invariant_available(kernels)``, they
    become ``InvariantLinear`` instead (an odd ``in_features`` keeps oneDNN), with or
    without ``batch_invariant``: there it is the faster matmul too. With AMX tiles,
    ``batch_invariant`` makes them ``TileLinear`` (shapes that are not multiples of 32
    keep oneDNN); where neither kernel can run, it only adds a note. Returns False,
    changing nothing, where the model is not bf16 or oneDNN is missing."""
    dtypes = {m.weight.dtype for m in model.modules() if type(m) is nn.Linear}
    if dtypes != {torch.bfloat16} or not available():
        return False
    invariant = invariant_available(kernels)
    tiles_only = batch_invariant and kernels is not None and kernels.has_tile_linear()
    if batch_invariant and not (invariant or tiles_only):
        print("specdec: batch-invariant bf16 projections need the fused kernels' AVX-512 "
              "or AMX build; using the packed projections", file=sys.stderr, flush=True)

    def packed(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
        if invariant and _invariant_fits(weight):
            return InvariantLinear(weight, bias, kernels)
        if tiles_only and _tiles_fit(kernels, weight):
            return TileLinear(weight, bias, kernels)
        return PackedLinear(weight, bias, batch_hint, kernels)

    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, packed(child.weight, child.bias))
    if getattr(model, "tie_word_embeddings", False):
        model.lm_head = packed(model.embed_tokens.weight, None)
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
        if type(module) is PackedLinear and max_rows > module.tile_rows:
            shapes.setdefault((module.in_features, module.out_features), module)
    with torch.inference_mode():
        for module in shapes.values():
            x = torch.zeros(max_rows, module.in_features, dtype=torch.bfloat16)
            for rows in range(1, max_rows + 1):
                module(x[:rows])
