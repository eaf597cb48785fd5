"""Which weight format a model runs in: a GGUF file's own quantized blocks or dense.

``EngineConfig.quantization``: ``"gguf"`` keeps a GGUF file's quantized projections
(``quant_linear.GgufLinear``), ``"none"`` runs the dequantized model in ``dtype``,
``"auto"`` takes ``"gguf"`` where it can run (a .gguf model and the fused kernels'
GGUF projections) -- the faster choice measured for single requests and batches
(docs/benchmarks.md). Asking for ``"gguf"`` where it cannot run falls back to dense
weights with one line on stderr (no kernels at the ``eager`` level), or is an error
where the model is not a GGUF file at all.
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

from specdec.model.gguf_weights import read_gguf_weights
from specdec.model.quant_linear import apply_gguf, log_dense


def choose(requested: str, gguf_path: Path | None, kernels) -> str:
    """``"gguf"`` or ``"none"`` for this model and these kernels."""
    if requested == "none":
        return "none"
    if gguf_path is None:
        if requested == "gguf":
            raise ValueError("quantization='gguf' needs a .gguf model file; "
                             "this model is a directory of dense weights")
        return "none"
    if kernels is None or not hasattr(kernels, "gguf_formats"):
        if requested == "gguf":
            print("specdec: quantization='gguf' needs the fused CPU kernels, which are off "
                  "here; running the dequantized weights", file=sys.stderr, flush=True)
        return "none"
    return "gguf"


def keep_gguf_blocks(model: nn.Module, gguf_path: Path, config, kernels) -> None:
    """Swap ``model``'s projections for its GGUF file's quantized blocks (in place)."""
    weights = read_gguf_weights(gguf_path, config.num_attention_heads,
                                getattr(config, "num_key_value_heads", None)
                                or config.num_attention_heads)
    log_dense(apply_gguf(model, weights, kernels))
