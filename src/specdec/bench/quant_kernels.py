"""GGUF projections (``Projection.gguf``) against oneDNN bf16 on SmolLM2-135M's shapes.

Per decoder layer: q|k|v fused, o, gate|up fused and down, each the median of its
calls while walking all the model's layers in order (so weights stream from memory as
in a decode step, not from a warm cache); and the tied 49152 x 576 Q8_0 lm_head.
Medians of single calls, not loop means, so a shared machine's preemptions count
little. Reports time per call, the weight bytes streamed per second, and the
machine's read bandwidth (``t.sum()`` over 512 MB) for scale. Run at another level
with ``SPECDEC_ISA=avx2`` (and ``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``)::

    python -m specdec.bench.quant_kernels [--threads 2] [--rows 1 4 16 64 512]

T = 1 streams the weights (bandwidth-bound); from T ~ 16 on the integer dot rate
counts (the repacked kernel: one VNNI step per 16 outputs and 4 inputs of an x row).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import gguf
import numpy as np
import torch

from specdec import isa, kernels
from specdec.bench.latency import memory_bandwidth
from specdec.model.loader import default_model_path

LAYER_PARTS = (("attn_q", "attn_k", "attn_v"), ("attn_output",), ("ffn_gate", "ffn_up"),
               ("ffn_down",))


@dataclass
class Weights:
    """One model's projections in both forms: GGUF kernels and oneDNN-packed."""

    layers_gguf: list[list[object]]  # per layer: [qkv, o, gate_up, down]
    layers_onednn: list[list[torch.Tensor]]
    in_features: list[int]  # per projection of a layer
    layer_bytes_gguf: int
    layer_bytes_onednn: int
    head_gguf: object
    head_onednn: torch.Tensor
    head_bytes_gguf: int
    head_bytes_onednn: int
    onednn_dtype: torch.dtype


def onednn_dtype() -> torch.dtype:
    """bf16 where oneDNN runs it at this level, else float32."""
    try:
        ones = torch.ones(32, 32, dtype=torch.bfloat16)
        packed = torch.ops.mkldnn._reorder_linear_weight(ones, 1)
        torch.ops.mkldnn._linear_pointwise(ones[:1], packed, None, "none", [], "")
        return torch.bfloat16
    except RuntimeError:
        return torch.float32


def pack(tensors: list[gguf.ReaderTensor], dtype: torch.dtype, batch_hint: int) -> torch.Tensor:
    dense = np.concatenate([gguf.quants.dequantize(t.data, t.tensor_type) for t in tensors])
    weight = torch.from_numpy(np.ascontiguousarray(dense)).to(dtype)
    return torch.ops.mkldnn._reorder_linear_weight(weight, batch_hint)


def gguf_projection(k, tensors: list[gguf.ReaderTensor]) -> object:
    return k.Projection.gguf([(t.tensor_type.name, torch.from_numpy(np.array(t.data)))
                              for t in tensors])


def load_weights(k, path: str, batch_hint: int) -> Weights:
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    count = sum(1 for name in tensors if name.endswith(".ffn_down.weight"))
    dtype = onednn_dtype()
    layers_gguf, layers_onednn = [], []
    for i in range(count):
        groups = [[tensors[f"blk.{i}.{name}.weight"] for name in names] for names in LAYER_PARTS]
        layers_gguf.append([gguf_projection(k, g) for g in groups])
        layers_onednn.append([pack(g, dtype, batch_hint) for g in groups])
    head = tensors.get("output.weight", tensors["token_embd.weight"])  # tied embeddings
    first = layers_gguf[0]
    dense = sum(p.out_features * p.in_features for p in first)
    return Weights(
        layers_gguf=layers_gguf, layers_onednn=layers_onednn,
        in_features=[p.in_features for p in first],
        layer_bytes_gguf=sum(p.nbytes for p in first),
        layer_bytes_onednn=dense * dtype.itemsize,
        head_gguf=gguf_projection(k, [head]), head_onednn=pack([head], dtype, batch_hint),
        head_bytes_gguf=head.data.nbytes,
        head_bytes_onednn=int(head.data.shape[0]) * int(head.shape[0]) * dtype.itemsize,
        onednn_dtype=dtype)


def call_medians(calls: list[Callable[[], object]], groups: int, sweeps: int) -> list[float]:
    """Each of ``calls`` timed alone, in order, ``sweeps`` times over; the median time of
    the calls i with i % groups == g, for each group g. Medians of single calls are
    robust to the preemptions of a shared machine, which a loop's mean is not."""
    for call in calls:
        call()
    times: list[list[float]] = [[] for _ in range(groups)]
    for _ in range(sweeps):
        for i, call in enumerate(calls):
            start = time.perf_counter()
            call()
            times[i % groups].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def onednn_linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def time_rows(k, w: Weights, rows: int, sweeps: int) -> dict[str, float]:
    """Seconds per call of one layer's projections (q|k|v, o, gate|up, down: the sum of
    each one's median over calls that walk all layers in order, so weights come from
    memory as in a decode step) and of the lm_head, GGUF and oneDNN, at ``rows`` x rows
    (bf16)."""
    torch.manual_seed(0)
    xs = [torch.randn(rows, n).to(torch.bfloat16) for n in w.in_features]
    xd = [x.to(w.onednn_dtype) for x in xs]

    def layer(projections: list[list[object]], run: Callable, inputs: list[torch.Tensor]) -> float:
        calls = [functools.partial(run, x, p) for layer in projections
                 for x, p in zip(inputs, layer, strict=True)]
        return sum(call_medians(calls, len(inputs), sweeps))

    def head(run: Callable, x: torch.Tensor, p: object) -> float:
        return call_medians([functools.partial(run, x, p)], 1, 4 * sweeps)[0]

    with torch.inference_mode():
        return {"layer_gguf": layer(w.layers_gguf, k.project, xs),
                "layer_onednn": layer(w.layers_onednn, onednn_linear, xd),
                "head_gguf": head(k.project, xs[0], w.head_gguf),
                "head_onednn": head(onednn_linear, xd[0], w.head_onednn)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64, 512])
    parser.add_argument("--sweeps", type=int, default=20, help="timed passes over the layers")
    parser.add_argument("--model", default=None, help="a GGUF file (default: SmolLM2-135M)")
    args = parser.parse_args()
    k = kernels.load()
    if k is None:
        raise SystemExit("the fused CPU kernels are unavailable at this level")
    torch.set_num_threads(args.threads)
    path = args.model or str(default_model_path())
    w = load_weights(k, path, max(args.rows))
    bandwidth = memory_bandwidth(kernels=k) / 1e9
    onednn = "oneDNN " + str(w.onednn_dtype).removeprefix("torch.")
    print(f"ISA level {isa.level()}, {args.threads} threads, {len(w.layers_gguf)} layers of "
          f"{path.rsplit('/', 1)[-1]}; memory read bandwidth {bandwidth:.1f} GB/s")
    print(f"weights per layer: gguf {w.layer_bytes_gguf / 1e6:.2f} MB, {onednn} "
          f"{w.layer_bytes_onednn / 1e6:.2f} MB; lm_head: gguf {w.head_bytes_gguf / 1e6:.1f} MB, "
          f"{onednn} {w.head_bytes_onednn / 1e6:.1f} MB")
    header = (f"{'T':>3} | {'layer gguf':>10} {onednn:>12} {'speedup':>7} {'GB/s':>6} | "
              f"{'lm_head gguf':>12} {onednn:>12} {'speedup':>7} {'GB/s':>6} {'% bw':>5}")
    print(header)
    print("-" * len(header))
    for rows in args.rows:
        t = time_rows(k, w, rows, args.sweeps)
        layer_gbs = w.layer_bytes_gguf / t["layer_gguf"] / 1e9
        head_gbs = w.head_bytes_gguf / t["head_gguf"] / 1e9
        print(f"{rows:>3} | {t['layer_gguf'] * 1e6:>8.1f}us {t['layer_onednn'] * 1e6:>10.1f}us "
              f"{t['layer_onednn'] / t['layer_gguf']:>6.2f}x {layer_gbs:>6.1f} | "
              f"{t['head_gguf'] * 1e6:>10.1f}us {t['head_onednn'] * 1e6:>10.1f}us "
              f"{t['head_onednn'] / t['head_gguf']:>6.2f}x {head_gbs:>6.1f} "
              f"{100 * head_gbs / bandwidth:>4.0f}%")


if __name__ == "__main__":
    main()
