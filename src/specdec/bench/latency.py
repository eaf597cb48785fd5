"""Single-request latency: TTFT and mean ITL for specdec and HF, plus the
weight-streaming floor (every linear layer of the model run once at batch 1).

With ``--speculative-method`` the same prompts also run with speculation, in the
same process, and the decode speed-up is printed with the acceptance metrics.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from specdec.bench.sampling import (
    add_sampling_arguments,
    hf_sampling,
    is_sampled,
    llamacpp_sampling,
    sampling_params,
    sampling_summary,
)
from specdec.bench.settle import settled
from specdec.bench.workload import chat_prompt_ids, extraction_prompts, random_prompt_ids


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--num-prompts", type=int, default=4, help="prompts run one at a time")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--input-len", type=int, default=0,
                        help="prompts of this many random tokens instead of the extraction "
                             "prompts (TTFT of long prompts)")
    parser.add_argument("--ignore-eos", action="store_true")
    parser.add_argument("--skip-hf", action="store_true")
    add_sampling_arguments(parser)
    parser.add_argument("--skip-llamacpp", action="store_true",
                        help="skip llama.cpp (run when llama-cpp-python is installed)")
    from specdec.cli.options import add_constraint_arguments

    add_constraint_arguments(parser)


def weight_streaming_floor(model, repeats: int = 30) -> float:
    """Seconds to run every linear layer (incl. the LM head) once on one token, through
    the same projection modules (and matmul kernels) the engine uses."""
    from specdec.model.llama import project

    projections = [m for m in model.modules() if hasattr(m, "in_features")]
    if getattr(model, "tie_word_embeddings", False):
        weight = model.embed_tokens.weight
        head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
        head.weight = weight
        projections.append(head)
    dtype = model.norm.weight.dtype
    x = {m.in_features: torch.randn(1, m.in_features, dtype=dtype) for m in projections}
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            for m in projections:
                project(m, x[m.in_features])
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def memory_bandwidth(size_bytes: int = 512 * 2**20, repeats: int = 7, kernels=None) -> float:
    """Bytes per second the CPU reads with all torch threads (best of ``repeats`` sums
    over a buffer larger than any cache): a sample of the bytes floor's denominator.
    With ``kernels`` the buffer is on 2 MB pages like their weights (a one-thread read
    is 31-33 GB/s there, 22-27 on 4 KB pages, on Zen 5), so the floor is the one they
    can reach."""
    if kernels is not None:
        buffer = kernels.huge_page_zeros([size_bytes // 4], torch.float32).fill_(1.0)
    else:
        buffer = torch.ones(size_bytes // 4, dtype=torch.float32)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        buffer.sum()
        best = min(best, time.perf_counter() - start)
    return size_bytes / best


def core_round_trip_ns(kernels) -> float | None:
    """Nanoseconds for a cache line to go between the first two CPUs this process may
    run on and back (None with one CPU or without the fused kernels). Under ~150 ns the
    two share a core complex; several hundred, they sit on two (each with its own path
    to memory: more bandwidth, and slower hand-offs between the step's threads)."""
    cpus = sorted(os.sched_getaffinity(0))
    if kernels is None or len(cpus) < 2:
        return None
    return kernels.core_round_trip_ns(cpus[0], cpus[1])


def mean_context(prompts: list[list[int]], outputs: list[list[int]]) -> float:
    """Mean context length over the decode steps (the tokens after each first one):
    a prompt of L tokens decoding n reads L + 1 .. L + n - 1 positions."""
    total = steps = 0
    for prompt, out in zip(prompts * (len(outputs) // len(prompts)), outputs, strict=True):
        n = len(out)
        total += sum(len(prompt) + t for t in range(1, n))
        steps += max(n - 1, 0)
    return total / max(steps, 1)


def measure(llm, prompts: list[list[int]], params, repeats: int, options=None) -> dict:
    """Run each prompt alone; decode time per output token across all runs."""
    from specdec import SamplingParams

    # Warm up on less than a KV block of the first prompt, so the prefix cache holds none
    # of the prompts measured.
    llm.generate([prompts[0][:8]], SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)
    ttfts, decode_s, decode_tokens, outs = [], 0.0, 0, []
    for _ in range(repeats):
        for prompt in prompts:
            out = llm.generate([prompt], params, use_tqdm=False, **(options or {}))[0]
            m = out.metrics
            ttfts.append(m.ttft)
            decode_s += m.finish_time - m.first_token_time
            decode_tokens += len(out.token_ids) - 1
            outs.append(out.token_ids)
    itl = decode_s / max(decode_tokens, 1)
    return {"ttft_ms": 1e3 * statistics.median(ttfts), "itl_ms": 1e3 * itl,
            "tok_s": 1 / itl, "outputs": outs, "stats": llm.stats()}


def main(args: argparse.Namespace) -> dict:
    from specdec import LLM, isa
    from specdec.cli.options import constraint_options, engine_kwargs
    from specdec.core.model_runner import ModelRunner
    from specdec.model.weight_info import streamed_weight_bytes

    kwargs = engine_kwargs(args)
    spec_options = kwargs.pop("speculative")
    started = time.perf_counter()
    llm = LLM(**kwargs)
    build_s = time.perf_counter() - started  # the engine's start, before the KV prefault
    llm = settled(llm)
    print(f"engine: {isa.engine_summary(llm.stats())}; built in {build_s:.2f} s")
    if args.input_len > 0:
        prompts = random_prompt_ids(len(llm.tokenizer), args.input_len, args.num_prompts)
    else:
        prompts = chat_prompt_ids(llm.tokenizer, extraction_prompts())[: args.num_prompts]
    sampled = is_sampled(args)  # outputs of different runs are then not compared
    params = sampling_params(args, args.max_tokens, args.ignore_eos)
    options = constraint_options(args)
    # Other tenants move this host's bandwidth between runs (40-73 GB/s seen): sample it
    # around the measured run and take the median, printing the spread.
    # The host also moves the two CPUs between one core complex and two (the step's
    # hand-offs between threads cost ~5x more on two): sampled with the bandwidth.
    kernels = llm.engine.kernels
    bandwidths, round_trips = [memory_bandwidth(kernels=kernels)], [core_round_trip_ns(kernels)]
    base = measure(llm, prompts, params, args.repeats, options)
    bandwidths.append(memory_bandwidth(kernels=kernels))
    round_trips.append(core_round_trip_ns(kernels))
    floor = weight_streaming_floor(llm.engine.model)
    bandwidths.append(memory_bandwidth(kernels=kernels))
    round_trips.append(core_round_trip_ns(kernels))
    bandwidth = statistics.median(bandwidths)
    weight_bytes = streamed_weight_bytes(llm.engine.model)
    dtype = str(llm.engine.dtype).removeprefix("torch.")
    result = {"dtype": dtype, "engine": isa.engine_summary(llm.stats()), "build_s": build_s,
              "num_prompts": len(prompts), "input_len": args.input_len, "ttft_ms": base["ttft_ms"],
              "itl_ms": base["itl_ms"], "floor_ms": 1e3 * floor,
              "itl_over_floor": base["itl_ms"] / (1e3 * floor),
              "weight_bytes": weight_bytes, "bandwidth_gb_s": bandwidth / 1e9,
              "bandwidth_samples_gb_s": [b / 1e9 for b in bandwidths],
              "bytes_floor_ms": 1e3 * weight_bytes / bandwidth,
              "core_round_trip_ns": round_trips}
    print(f"specdec ({dtype}, {len(prompts)} prompts one at a time"
          f"{f' of {args.input_len} random tokens' if args.input_len > 0 else ''}, "
          f"max {args.max_tokens} new"
          f"{f', sampled: {sampling_summary(args)}' if sampled else ''}"
          f"{', constrained by ' + str(options) if options else ''}): "
          f"TTFT {base['ttft_ms']:.1f} ms, mean ITL {base['itl_ms']:.2f} ms "
          f"({base['tok_s']:.1f} tok/s)")
    print(f"weight-streaming floor (all linears once, batch 1): {1e3 * floor:.2f} ms "
          f"-> ITL / floor = {result['itl_over_floor']:.2f}x")
    print(f"weights read per token {weight_bytes / 2**20:.1f} MiB "
          f"({llm.stats()['weight_layout']}; resident "
          f"{base['stats']['weight_bytes'] / 2**20:.1f} MiB) / "
          f"memory bandwidth {bandwidth / 1e9:.1f} GB/s (median of {len(bandwidths)} samples "
          f"around the run: {min(bandwidths) / 1e9:.1f}-{max(bandwidths) / 1e9:.1f}) = "
          f"{result['bytes_floor_ms']:.2f} ms "
          f"-> ITL / bytes floor = {base['itl_ms'] / result['bytes_floor_ms']:.2f}x")
    if None not in round_trips:
        print(f"core round trip {' / '.join(f'{ns:.0f}' for ns in round_trips)} ns (before / "
              "after the run / after the floor; under ~150 ns: the two CPUs share a core "
              "complex, several hundred: they sit on two)")
    # Each decode token also reads its context's K/V rows in every layer: at long
    # contexts as many bytes as the weights.
    kv_bytes = mean_context(prompts, base["outputs"]) * ModelRunner.kv_bytes_per_block(
        llm.engine.model_config, 1, llm.engine.kv_cache_dtype)
    result["kv_bytes_per_token"] = kv_bytes
    result["kv_cache_dtype"] = str(llm.engine.kv_cache_dtype).removeprefix("torch.")
    result["bytes_with_kv_floor_ms"] = 1e3 * (weight_bytes + kv_bytes) / bandwidth
    print(f"with the KV cache each token reads ({kv_bytes / 2**20:.1f} MiB at the mean context"
          f" of {mean_context(prompts, base['outputs']):.0f}): floor "
          f"{result['bytes_with_kv_floor_ms']:.2f} ms -> ITL / (weights + KV) floor = "
          f"{base['itl_ms'] / result['bytes_with_kv_floor_ms']:.2f}x")
    result["steps_on_fewer_threads"] = fewer = base["stats"]["steps_on_fewer_threads"]
    if fewer:
        print(f"note: {fewer} of {base['stats']['steps']} steps ran on fewer threads (other "
              "tasks wanted the cores): not a quiet machine's figure")
    if spec_options:
        del llm
        spec_llm = settled(LLM(**kwargs, speculative=spec_options))
        spec = measure(spec_llm, prompts, params, args.repeats, options)
        s = spec["stats"]
        result.update(spec_itl_ms=spec["itl_ms"], spec_speedup=base["itl_ms"] / spec["itl_ms"],
                      spec_identical=None if sampled else spec["outputs"] == base["outputs"],
                      acceptance_rate=s["spec_acceptance_rate"],
                      mean_acceptance_length=s["spec_mean_acceptance_length"],
                      acceptance_per_position=s["spec_acceptance_per_position"])
        print(f"speculative {spec_options}: mean ITL {spec['itl_ms']:.2f} ms "
              f"({spec['tok_s']:.1f} tok/s) -> decode speed-up {result['spec_speedup']:.2f}x"
              + ("" if sampled else f"; greedy outputs identical: {result['spec_identical']}"))
        print(f"  acceptance rate {s['spec_acceptance_rate']:.2f}, mean acceptance length "
              f"{s['spec_mean_acceptance_length']:.2f}, per position "
              f"{[round(x, 2) for x in s['spec_acceptance_per_position']]}")
    if not args.skip_llamacpp:
        result["llamacpp"] = _llamacpp(args, prompts, result, base)
    if not args.skip_hf:
        result.update(_hf_latency(kwargs, prompts[0], args))
        print(f"HF generate (prompt 0): TTFT {result['hf_ttft_ms']:.1f} ms, mean ITL "
              f"{result['hf_itl_ms']:.2f} ms")
    return result


def _llamacpp(args: argparse.Namespace, prompts: list[list[int]], result: dict,
              base: dict) -> dict:
    """llama.cpp on the same GGUF, prompts and thread count; ratios printed against it."""
    from specdec.bench.llamacpp_peer import llamacpp_latency
    from specdec.model.loader import gguf_file

    path = gguf_file(args.model)
    if path is None:
        return {"status": "not a GGUF model"}
    peer = llamacpp_latency(path, prompts, args.max_tokens, torch.get_num_threads(),
                            args.ignore_eos, args.repeats, llamacpp_sampling(args))
    if peer["status"] != "ok":
        print(f"llama.cpp: {peer['status']}")
        return peer
    outputs = peer.pop("outputs")
    same = None
    if not is_sampled(args):
        same = sum(a[: len(b)] == b[: len(a)]
                   for a, b in zip(base["outputs"], outputs, strict=True))
    peer.update(speedup=peer["itl_ms"] / result["itl_ms"],
                ttft_speedup=peer["ttft_ms"] / result["ttft_ms"], same_greedy_prefix=same)
    print(f"llama.cpp {peer['version']} ({path.name}, {peer['threads']} threads): TTFT "
          f"{peer['ttft_ms']:.1f} ms, mean ITL {peer['itl_ms']:.2f} ms ({peer['tok_s']:.1f} tok/s)"
          f" -> specdec / llama.cpp = {peer['speedup']:.2f}x (TTFT {peer['ttft_speedup']:.2f}x)"
          f"; model load {peer['load_s']:.2f} s (specdec's engine {result['build_s']:.2f} s)"
          + (f", with speculation {peer['itl_ms'] / result['spec_itl_ms']:.2f}x"
             if "spec_itl_ms" in result else "")
          + ("" if same is None else
             f"; greedy outputs agreeing (shorter a prefix of longer): {same}/{len(outputs)}"))
    return peer


def _hf_latency(kwargs, prompt: list[int], args) -> dict:
    from specdec.bench.hf_peer import load_hf_model
    from specdec.model.builder import resolve_dtype
    from specdec.model.loader import resolve_model_dir

    model = load_hf_model(resolve_model_dir(kwargs["model"]), resolve_dtype(kwargs["dtype"]))
    ids = torch.tensor([prompt])

    sampling = hf_sampling(args)

    def run(n: int) -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                           min_new_tokens=n, pad_token_id=0, **sampling)
        return time.perf_counter() - start

    run(4)
    ttft = statistics.median(run(1) for _ in range(3))
    total = run(args.max_tokens)
    return {"hf_ttft_ms": 1e3 * ttft, "hf_itl_ms": 1e3 * (total - ttft) / (args.max_tokens - 1)}
