"""The paged-attention kernel (``kernels/attention_tile.h``) alone at a long context.

One request of ``--query-len`` new tokens (1: a decode, 5: a 4-draft verification)
attends to ``--context`` positions in randomly placed cache blocks, in each of
``--layers`` caches on 2 MB pages (SmolLM2-135M's shape by default: 9 query heads, 3 KV
heads of 64), so its K/V rows come from memory as in a decode step. Prints the time per
layer (best of ``--repeats`` passes over the layers) and the K/V bytes it read per
second. ``paged_attention`` with one request splits it by KV head across threads.
``--kv-cache-dtype float16`` keeps float32 queries over a half cache (the engine's
``kv_cache_dtype="float16"``); ``--partition`` sets the positions per attention task
(512 by default; one at least the context long reads it whole, a task per query head)::

    python -m specdec.bench.attention_kernel [--threads 1 2] [--query-len 1 5] \
        [--kv-cache-dtype auto float16] [--partition 512 2048]
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch

from specdec import isa, kernels

BLOCK_SIZE = 16


def caches_and_table(k, layers: int, context: int, kv_heads: int, head_dim: int,
                     dtype: torch.dtype, seed: int = 0) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``layers`` caches [2, slots, kv_heads, head_dim] of random values on 2 MB pages, and
    one block table over twice the blocks the context needs, in random order."""
    generator = torch.Generator().manual_seed(seed)
    blocks = -(-context // BLOCK_SIZE)
    slots = 2 * blocks * BLOCK_SIZE
    caches = []
    for _ in range(layers):
        cache = k.huge_page_zeros([2, slots, kv_heads, head_dim], dtype)
        cache.copy_(torch.randn(cache.shape, generator=generator).to(dtype))
        caches.append(cache)
    table = torch.randperm(2 * blocks, generator=generator)[:blocks].to(torch.int32)
    return caches, table.unsqueeze(0)


def seconds_per_layer(k, caches: list[torch.Tensor], table: torch.Tensor, context: int,
                      query_len: int, query_heads: int, repeats: int,
                      dtype: torch.dtype) -> float:
    """Best time of one paged_attention call (queries in ``dtype``), over ``repeats``
    passes through the layers."""
    head_dim = caches[0].shape[-1]
    q = torch.randn(query_len, query_heads, head_dim, dtype=dtype)
    out = torch.empty_like(q)
    lens = [torch.tensor([v], dtype=torch.int32) for v in (0, query_len, context)]
    best = float("inf")
    for _ in range(repeats + 1):  # the first pass warms up
        start = time.perf_counter()
        for cache in caches:
            k.paged_attention(out, q, cache, table, *lens, BLOCK_SIZE, head_dim**-0.5, 0)
        best = min(best, (time.perf_counter() - start) / len(caches))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=2000)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--query-heads", type=int, default=9)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--kv-cache-dtype", nargs="+", choices=["auto", "float16"],
                        default=["auto"], help="the cache's dtype (auto: the queries')")
    parser.add_argument("--partition", type=int, nargs="+", default=[512],
                        help="positions per attention partition (multiples of 64)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--query-len", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    k = kernels.load()
    if k is None:
        raise SystemExit("the fused CPU kernels are unavailable at this level")
    dtype = getattr(torch, args.dtype)
    if "float16" in args.kv_cache_dtype and dtype != torch.float32:
        raise SystemExit("--kv-cache-dtype float16 goes with --dtype float32")
    print(f"{isa.describe()}; {args.dtype}, {args.query_heads} query / {args.kv_heads} KV "
          f"heads of {args.head_dim}, context {args.context}, {args.layers} layers' caches")
    # Each cache dtype's rows are the same random values (rounded to half for float16).
    runs = {}
    for name in args.kv_cache_dtype:
        cache_dtype = torch.float16 if name == "float16" else dtype
        runs[name] = caches_and_table(k, args.layers, args.context, args.kv_heads,
                                      args.head_dim, cache_dtype)
    for threads in args.threads:
        torch.set_num_threads(threads)
        for query_len in args.query_len:
            for (caches, table), partition in itertools.product(runs.values(), args.partition):
                was = k.set_attention_partition(partition)
                s = seconds_per_layer(k, caches, table, args.context, query_len,
                                      args.query_heads, args.repeats, dtype)
                k.set_attention_partition(was)
                kv_bytes = (2 * args.context * args.kv_heads * args.head_dim
                            * caches[0].element_size())
                print(f"threads {threads}, {query_len} new token(s), kv cache "
                      f"{str(caches[0].dtype).removeprefix('torch.')}, partitions of "
                      f"{partition}: {s * 1e6:8.1f} us a layer, K/V read at "
                      f"{kv_bytes / s / 1e9:5.1f} GB/s")


if __name__ == "__main__":
    main()
