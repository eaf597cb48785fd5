"""Single-request latency: TTFT and mean ITL for specdec and HF, plus the
weight-streaming floor (every linear layer of the model run once at batch 1)."""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from specdec.bench.workload import chat_prompt_ids, extraction_prompts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompt-index", type=int, default=0)
    parser.add_argument("--skip-hf", action="store_true")


def weight_streaming_floor(model, repeats: int = 30) -> float:
    """Seconds to run every linear layer (incl. the LM head) once on one token."""
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    weights.append(model.embed_tokens.weight if model.tie_word_embeddings else model.lm_head.weight)
    x = {w.shape[1]: torch.randn(1, w.shape[1], dtype=w.dtype) for w in weights}
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            for w in weights:
                F.linear(x[w.shape[1]], w)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(args: argparse.Namespace) -> dict:
    from specdec import LLM, SamplingParams
    from specdec.cli import engine_kwargs

    llm = LLM(**engine_kwargs(args))
    prompt = chat_prompt_ids(llm.tokenizer, extraction_prompts())[args.prompt_index]
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    llm.generate([prompt], SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)
    ttfts, itls = [], []
    for _ in range(args.repeats):
        out = llm.generate([prompt], params, use_tqdm=False)[0]
        ttfts.append(out.metrics.ttft)
        itls.append(out.metrics.mean_itl)
    floor = weight_streaming_floor(llm.engine.model)
    result = {
        "dtype": str(llm.engine.dtype).removeprefix("torch."),
        "prompt_tokens": len(prompt),
        "specdec_ttft_ms": 1e3 * statistics.median(ttfts),
        "specdec_itl_ms": 1e3 * statistics.median(itls),
        "floor_ms": 1e3 * floor,
    }
    result["itl_over_floor"] = result["specdec_itl_ms"] / result["floor_ms"]
    print(f"specdec ({result['dtype']}, prompt {len(prompt)} tokens, {args.max_tokens} new): "
          f"TTFT {result['specdec_ttft_ms']:.1f} ms, mean ITL {result['specdec_itl_ms']:.2f} ms "
          f"({1e3 / result['specdec_itl_ms']:.0f} tok/s)")
    print(f"weight-streaming floor (all linears once, batch 1): {result['floor_ms']:.2f} ms "
          f"-> ITL / floor = {result['itl_over_floor']:.2f}x")
    if not args.skip_hf:
        result.update(_hf_latency(llm, prompt, args))
        print(f"HF generate: TTFT {result['hf_ttft_ms']:.1f} ms, mean ITL "
              f"{result['hf_itl_ms']:.2f} ms; specdec ITL speed-up "
              f"{result['hf_itl_ms'] / result['specdec_itl_ms']:.2f}x")
    return result


def _hf_latency(llm, prompt: list[int], args) -> dict:
    from specdec.bench.hf_peer import load_hf_model

    model = load_hf_model(llm.engine.model_dir, llm.engine.dtype)
    ids = torch.tensor([prompt])

    def run(n: int) -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                           min_new_tokens=n, do_sample=False, pad_token_id=0)
        return time.perf_counter() - start

    run(4)
    ttft = statistics.median(run(1) for _ in range(args.repeats))
    total = statistics.median(run(args.max_tokens) for _ in range(args.repeats))
    return {"hf_ttft_ms": 1e3 * ttft, "hf_itl_ms": 1e3 * (total - ttft) / (args.max_tokens - 1)}
