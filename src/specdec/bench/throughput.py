"""Offline throughput: specdec vs HF transformers ``generate``, same prompts, same run."""

from __future__ import annotations

import argparse
import time

from specdec.bench.sampling import (
    add_sampling_arguments,
    hf_sampling,
    is_sampled,
    sampling_params,
    sampling_summary,
)
from specdec.bench.settle import settled
from specdec.bench.workload import chat_prompt_ids, extraction_prompts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--hf-batch-size", type=int, default=64)
    parser.add_argument("--skip-hf", action="store_true", help="specdec only")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="every request generates --max-tokens (a fixed-length workload)")
    parser.add_argument("--solo-check", type=int, default=8, metavar="N",
                        help="rerun the first N prompts one at a time: are specdec's greedy "
                             "outputs the same alone as in the batch? (0: skip)")
    add_sampling_arguments(parser)


def main(args: argparse.Namespace) -> dict:
    from specdec import LLM, isa
    from specdec.bench.hf_peer import hf_generate, load_hf_model
    from specdec.cli.options import engine_kwargs

    kwargs = engine_kwargs(args)
    spec_options = kwargs.pop("speculative")
    llm = settled(LLM(**kwargs))
    print(f"engine: {isa.engine_summary(llm.stats())}")
    tok = llm.tokenizer
    prompts = chat_prompt_ids(tok, extraction_prompts(args.num_prompts))
    params = sampling_params(args, args.max_tokens, args.ignore_eos)
    sampled = is_sampled(args)  # outputs are then not compared
    sd_time, outs = _timed_run(llm, prompts, params)
    sd_tokens = sum(len(o.token_ids) for o in outs)
    result = {
        "dtype": str(llm.engine.dtype).removeprefix("torch."),
        "engine": isa.engine_summary(llm.stats()),
        "num_prompts": len(prompts),
        "specdec_s": sd_time,
        "specdec_tokens": sd_tokens,
        "specdec_tok_s": sd_tokens / sd_time,
        "specdec_steps": llm.stats()["steps"],
    }
    print(f"specdec: {sd_tokens} tokens in {sd_time:.2f} s = {sd_tokens / sd_time:.1f} tok/s "
          f"({result['dtype']}, {len(prompts)} prompts"
          f"{f', sampled: {sampling_summary(args)}' if sampled else ''})")
    if args.solo_check and not sampled:
        solo = [llm.generate([p], params, use_tqdm=False)[0].token_ids
                for p in prompts[: args.solo_check]]
        result["solo_identical"] = sum(
            a == b.token_ids for a, b in zip(solo, outs, strict=False))
        print(f"specdec greedy outputs alone vs in the batch of {len(prompts)}: "
              f"{result['solo_identical']}/{len(solo)} identical")
    if spec_options:
        spec_llm = settled(LLM(**kwargs, speculative=spec_options))
        spec_time, spec_outs = _timed_run(spec_llm, prompts, params)
        spec_tokens = sum(len(o.token_ids) for o in spec_outs)
        s = spec_llm.stats()
        result.update(spec_tok_s=spec_tokens / spec_time,
                      spec_ratio=(spec_tokens / spec_time) / (sd_tokens / sd_time),
                      spec_skipped_by_policy=s["spec_requests_skipped_by_policy"],
                      spec_acceptance_rate=s["spec_acceptance_rate"])
        print(f"specdec + speculation {spec_options}: {spec_tokens / spec_time:.1f} tok/s = "
              f"{result['spec_ratio']:.2f}x of speculation off; drafted for "
              f"{s['spec_num_drafts']} request-steps, skipped by the batch-size policy for "
              f"{s['spec_requests_skipped_by_policy']}; acceptance "
              f"{s['spec_acceptance_rate']:.2f}")
        del spec_llm
    if not args.skip_hf:
        model = load_hf_model(llm.engine.model_dir, llm.engine.dtype)
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        eos = set(llm.engine.eos_token_ids)
        hf_generate(model, prompts[:2], 4, eos, pad, 2)  # warm-up
        hf_time, hf_outs = hf_generate(model, prompts, args.max_tokens, eos, pad,
                                          args.hf_batch_size, args.ignore_eos, hf_sampling(args))
        hf_tokens = sum(len(o) for o in hf_outs)
        same = None if sampled else sum(
            a.token_ids == b for a, b in zip(outs, hf_outs, strict=True))
        result.update(hf_s=hf_time, hf_tokens=hf_tokens, hf_tok_s=hf_tokens / hf_time,
                      ratio=(sd_tokens / sd_time) / (hf_tokens / hf_time), identical=same)
        print(f"HF generate (batch {args.hf_batch_size}, left-padded): {hf_tokens} tokens in "
              f"{hf_time:.2f} s = {hf_tokens / hf_time:.1f} tok/s")
        print(f"ratio specdec / HF: {result['ratio']:.2f}x"
              + ("" if sampled else f"   identical outputs: {same}/{len(outs)}"))
    return result


def _timed_run(llm, prompts, params):
    from specdec import SamplingParams

    llm.generate(prompts[:2], SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    return time.perf_counter() - start, outs
