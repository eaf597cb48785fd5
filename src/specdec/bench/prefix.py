"""Prefix caching: chat requests sharing a long system prompt, cache on vs off.

Workload: ``--num-requests`` (64) chat-templated requests, all submitted at once,
each = one shared system message of >= 512 tokens + a distinct short user turn.
The same prompts run on two fresh engines in one process, caching off then on,
with the same dtype. Reported per engine: mean / p99 time to first token, wall
time, request and token throughput; for caching on also the hit rate.

*Shareable tokens*: what an unbounded cache could serve. For each request, its
longest common token prefix with any earlier request, in full blocks, never the
last prompt token (the first request finds a cold cache: 0). The hit rate of the
shareable tokens is ``prefix_cache_hits / shareable``; the plain hit rate divides
by all prompt tokens instead. Greedy outputs are compared between the two engines;
in float32 they match, in bfloat16 a few may differ (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

TOPICS = [
    "refunds", "shipping delays", "damaged items", "warranty claims", "account security",
    "subscription changes", "gift cards", "international orders", "price matching",
    "product recalls", "loyalty points", "invoice requests",
]
ITEMS = ["a kettle", "headphones", "a desk lamp", "running shoes", "a backpack", "a blender"]
MOODS = ["late", "broken", "the wrong colour", "missing a part", "twice", "without a receipt"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=16, help="new tokens per request")
    parser.add_argument("--min-system-tokens", type=int, default=512)


def system_prompt(tokenizer, min_tokens: int) -> str:
    """A support-desk policy, one numbered rule per topic, long enough to reach
    ``min_tokens`` tokens (deterministic, so every run sees the same prompt)."""
    lines = ["You are the customer support assistant of Northwind Goods. Follow this policy."]
    n = 0
    while len(tokenizer.encode("\n".join(lines))) < min_tokens:
        topic = TOPICS[n % len(TOPICS)]
        lines.append(
            f"Rule {n + 1} ({topic}): listen to the customer, restate the {topic} problem in "
            f"one sentence, check the order number, explain the {topic} options that apply, "
            f"never promise what rule {n + 1} does not allow, and end with a clear next step."
        )
        n += 1
    return "\n".join(lines)


def user_turn(i: int) -> str:
    item, mood = ITEMS[i % len(ITEMS)], MOODS[(i // len(ITEMS)) % len(MOODS)]
    return f"Order {1000 + 7 * i}: {item} arrived {mood}. What can you do for me?"


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def shareable_tokens(prompts: list[list[int]], block_size: int) -> int:
    total = 0
    for i, prompt in enumerate(prompts):
        best = max((common_prefix_len(prompt, earlier) for earlier in prompts[:i]), default=0)
        total += min(best, len(prompt) - 1) // block_size * block_size
    return total


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 100])."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def run_engine(engine_args: dict, prompts: list[list[int]], max_tokens: int) -> dict[str, Any]:
    from specdec import LLM, SamplingParams, isa

    llm = LLM(**engine_args)
    warm = SamplingParams(max_tokens=2, temperature=0.0)
    llm.generate([llm.tokenizer.encode("Warm-up: hello there.")] * 2, warm, use_tqdm=False)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    stats_before = llm.stats()
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - start
    stats = llm.stats()
    ttfts = [o.metrics.ttft for o in outs]
    num_out = sum(len(o.token_ids) for o in outs)

    def delta(key: str) -> int:
        return stats.get(key, 0) - stats_before.get(key, 0)

    return {
        "dtype": stats["dtype"],
        "engine": isa.engine_summary(stats),
        "mean_ttft_s": statistics.fmean(ttfts),
        "p99_ttft_s": percentile(ttfts, 99),
        "wall_s": wall,
        "requests_per_s": len(prompts) / wall,
        "output_tokens_per_s": num_out / wall,
        "prompt_tokens_per_s": sum(len(p) for p in prompts) / wall,
        "forward_tokens": delta("forward_tokens"),
        "prefix_cache_queries": delta("prefix_cache_queries"),
        "prefix_cache_hits": delta("prefix_cache_hits"),
        "prefix_cache_evictions": delta("prefix_cache_evictions"),
        "token_ids": [o.token_ids for o in outs],
    }


def main(args: argparse.Namespace) -> dict:
    from transformers import AutoTokenizer

    from specdec.cli.options import engine_kwargs
    from specdec.model.loader import resolve_model_dir

    base = engine_kwargs(args)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(base["model"]))
    system = system_prompt(tokenizer, args.min_system_tokens)
    prompts = []
    for i in range(args.num_requests):
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": user_turn(i)},
        ]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))

    off = run_engine({**base, "enable_prefix_caching": False}, prompts, args.max_tokens)
    on = run_engine({**base, "enable_prefix_caching": True, "dtype": off["dtype"]}, prompts,
                    args.max_tokens)

    block_size = 16  # EngineConfig default; the CLI does not change it
    shared = min(common_prefix_len(prompts[0], p) for p in prompts)
    shareable = shareable_tokens(prompts, block_size)
    same = sum(a == b for a, b in zip(on.pop("token_ids"), off.pop("token_ids"), strict=True))
    result = {
        "num_requests": len(prompts),
        "system_prompt_tokens": len(tokenizer.encode(system)),
        "shared_prefix_tokens": shared,
        "mean_prompt_tokens": statistics.fmean(len(p) for p in prompts),
        "dtype": off["dtype"],
        "engine": off["engine"],
        "same_greedy_outputs": same,
        "shareable_tokens": shareable,
        "hit_rate_of_shareable": on["prefix_cache_hits"] / shareable if shareable else 0.0,
        "hit_rate_of_prompt_tokens": on["prefix_cache_hits"] / max(1, on["prefix_cache_queries"]),
        "mean_ttft_speedup": off["mean_ttft_s"] / on["mean_ttft_s"],
        "p99_ttft_speedup": off["p99_ttft_s"] / on["p99_ttft_s"],
        "throughput_speedup": on["requests_per_s"] / off["requests_per_s"],
        "off": off,
        "on": on,
    }
    _print_report(result)
    return result


def _print_report(r: dict) -> None:
    print(f"prefix caching: {r['num_requests']} requests, system prompt "
          f"{r['system_prompt_tokens']} tokens, shared prefix {r['shared_prefix_tokens']} tokens, "
          f"mean prompt {r['mean_prompt_tokens']:.0f} tokens, dtype {r['dtype']}")
    print(f"engine: {r['engine']}")
    print(f"{'':>14} {'mean TTFT':>10} {'p99 TTFT':>10} {'wall':>8} {'req/s':>7} "
          f"{'out tok/s':>10} {'fwd tokens':>11}")
    for name in ("off", "on"):
        e = r[name]
        print(f"{'caching ' + name:>14} {e['mean_ttft_s'] * 1e3:>8.0f}ms "
              f"{e['p99_ttft_s'] * 1e3:>8.0f}ms {e['wall_s']:>7.2f}s {e['requests_per_s']:>7.2f} "
              f"{e['output_tokens_per_s']:>10.1f} "
              f"{e['forward_tokens']:>11}")
    print(f"mean TTFT {r['mean_ttft_speedup']:.1f}x lower, p99 TTFT {r['p99_ttft_speedup']:.1f}x "
          f"lower, throughput {r['throughput_speedup']:.1f}x; hit rate "
          f"{r['hit_rate_of_shareable']:.1%} of shareable tokens "
          f"({r['hit_rate_of_prompt_tokens']:.1%} of all prompt tokens); "
          f"identical greedy outputs: {r['same_greedy_outputs']}/{r['num_requests']}")
