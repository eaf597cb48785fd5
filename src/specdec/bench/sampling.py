"""The sampling options the benchmarks share: one setting for specdec and its peers."""

from __future__ import annotations

import argparse


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="sample at this temperature (seeded) in specdec and its peers; "
                             "0 is greedy")
    parser.add_argument("--top-k", type=int, default=0, help="with --temperature (0: none)")
    parser.add_argument("--top-p", type=float, default=1.0, help="with --temperature")
    parser.add_argument("--min-p", type=float, default=0.0, help="with --temperature")


def is_sampled(args: argparse.Namespace) -> bool:
    return args.temperature > 0


def sampling_params(args: argparse.Namespace, max_tokens: int, ignore_eos: bool):
    """specdec's SamplingParams for the run: greedy, or sampled with seed 0."""
    from specdec import SamplingParams

    return SamplingParams(max_tokens=max_tokens, temperature=args.temperature,
                          top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                          seed=0 if is_sampled(args) else None, ignore_eos=ignore_eos)


def sampling_summary(args: argparse.Namespace) -> str:
    """"temperature 0.8, top-k 40, top-p 0.95, min-p 0.05": the filters that are on."""
    parts = [f"temperature {args.temperature}"]
    if args.top_k > 0:
        parts.append(f"top-k {args.top_k}")
    if args.top_p < 1.0:
        parts.append(f"top-p {args.top_p}")
    if args.min_p > 0:
        parts.append(f"min-p {args.min_p}")
    return ", ".join(parts)


def hf_sampling(args: argparse.Namespace) -> dict:
    """``generate`` keyword arguments for the same setting (HF's top-k 50 off)."""
    if not is_sampled(args):
        return {"do_sample": False}
    return {"do_sample": True, "temperature": args.temperature, "top_k": args.top_k,
            "top_p": args.top_p, "min_p": args.min_p or None}


def llamacpp_sampling(args: argparse.Namespace) -> dict:
    """``Llama.generate`` keyword arguments for the same setting (its own defaults,
    top-k 40, top-p 0.95 and min-p 0.05, off)."""
    if not is_sampled(args):
        return {"temp": 0.0, "top_k": 1}
    return {"temp": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
            "min_p": args.min_p}
