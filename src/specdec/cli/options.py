"""Command-line options for the engine, speculation, sampling and constraints.

Each flag's default is read from the dataclass field it sets (``EngineConfig``,
``SpeculativeConfig``, ``SamplingParams``), so the command line cannot drift from the
Python API; ``engine_kwargs``, ``speculative_options`` and ``sampling_params`` turn the
parsed flags back into those configs. Shared by the ``specdec`` commands, the server and
the benchmarks; nothing here imports the CLI's commands.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields
from typing import Any

from specdec.config import KV_CACHE_DTYPES, QUANTIZATIONS, EngineConfig
from specdec.sampling_params import SamplingParams
from specdec.speculative.config import METHODS, SpeculativeConfig

CLI_DTYPES = ("auto", "float32", "bfloat16")  # config.DTYPES less float16
DRAFT_QUANTIZATIONS = ("int8", "none")  # SpeculativeConfig.draft_quantization's values
# ``specdec generate`` samples more tokens than SamplingParams and greedily by default.
GENERATE_SAMPLING_DEFAULTS = {"max_tokens": 128, "temperature": 0.0}


def field_default(cls: type, name: str) -> Any:
    """The declared default of the dataclass field ``name`` (a factory is called)."""
    for f in fields(cls):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
            raise TypeError(f"{cls.__name__}.{name} has no default")
    raise AttributeError(f"{cls.__name__} has no field {name!r}")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    def engine(name: str) -> Any:
        return field_default(EngineConfig, name)

    def spec(name: str) -> Any:
        return field_default(SpeculativeConfig, name)

    parser.add_argument("--model", default=engine("model"),
                        help="local HF dir or .gguf (default: SmolLM2)")
    parser.add_argument("--dtype", default=engine("dtype"), choices=list(CLI_DTYPES))
    parser.add_argument("--kv-cache-dtype", default=engine("kv_cache_dtype"),
                        choices=list(KV_CACHE_DTYPES),
                        help="KV cache storage: auto is the model dtype; float16 halves a "
                             "float32 model's cache (--dtype float32)")
    parser.add_argument("--quantization", default=engine("quantization"),
                        choices=list(QUANTIZATIONS),
                        help="a .gguf model: gguf keeps its quantized weights, none "
                             "dequantizes them (auto: gguf where the kernels run it)")
    parser.add_argument("--max-num-seqs", type=int, default=engine("max_num_seqs"))
    parser.add_argument("--max-num-batched-tokens", type=int,
                        default=engine("max_num_batched_tokens"))
    parser.add_argument("--no-prefix-caching", dest="enable_prefix_caching",
                        action="store_false", default=engine("enable_prefix_caching"))
    parser.add_argument("--no-fused-kernels", dest="fused_kernels", action="store_false",
                        default=engine("fused_kernels"),
                        help="plain eager PyTorch: no C++ kernels, no pre-packed weights")
    parser.add_argument("--batch-invariant", dest="batch_invariant",
                        action=argparse.BooleanOptionalAction,
                        default=engine("batch_invariant"),
                        help="outputs that do not depend on the batch; on by itself "
                             "where the projections allow it (GGUF weights, bf16 on "
                             "AVX-512 CPUs without AMX); on AMX CPUs it puts dense bf16 "
                             "on the AMX tiles alone")
    parser.add_argument("--threads", dest="num_threads", type=int,
                        default=engine("num_threads"), help="torch threads (default: all cores)")
    parser.add_argument("--adaptive-threads", dest="adaptive_threads",
                        action=argparse.BooleanOptionalAction,
                        default=engine("adaptive_threads"),
                        help="run each step on the cores other tasks leave free "
                             "(--no-adaptive-threads: always --threads)")
    # No method (EngineConfig.speculative is None): speculation off.
    parser.add_argument("--speculative-method", choices=list(METHODS),
                        default=engine("speculative"))
    parser.add_argument("--num-speculative-tokens", type=int,
                        default=spec("num_speculative_tokens"))
    parser.add_argument("--prompt-lookup-min", type=int, default=spec("prompt_lookup_min"),
                        help="n-gram: shortest match")
    parser.add_argument("--prompt-lookup-max", type=int, default=spec("prompt_lookup_max"),
                        help="n-gram: longest match")
    parser.add_argument("--draft-model", default=spec("model"), help="draft model path "
                        "(default: an int8 weight-only copy of the target)")
    parser.add_argument("--draft-quantization", choices=list(DRAFT_QUANTIZATIONS),
                        default=spec("draft_quantization"))


def engine_kwargs(args: argparse.Namespace) -> dict:
    """``EngineConfig`` keywords from the flags of :func:`add_engine_arguments`."""
    return dict(
        model=args.model,
        dtype=args.dtype,
        kv_cache_dtype=args.kv_cache_dtype,
        quantization=args.quantization,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enable_prefix_caching=args.enable_prefix_caching,
        fused_kernels=args.fused_kernels,
        batch_invariant=args.batch_invariant,
        num_threads=args.num_threads,
        adaptive_threads=args.adaptive_threads,
        speculative=speculative_options(args),
    )


def speculative_options(args: argparse.Namespace) -> dict | None:
    """``EngineConfig.speculative``: None without ``--speculative-method``."""
    if not getattr(args, "speculative_method", None):
        return None
    options = {"method": args.speculative_method,
               "num_speculative_tokens": args.num_speculative_tokens}
    if args.speculative_method == "draft":
        options.update(model=args.draft_model, draft_quantization=args.draft_quantization)
    else:
        options.update(prompt_lookup_min=args.prompt_lookup_min,
                       prompt_lookup_max=args.prompt_lookup_max)
    return options


def add_sampling_arguments(parser: argparse.ArgumentParser, **defaults: Any) -> None:
    """Sampling flags; ``defaults`` override ``SamplingParams``' own by field name."""
    def sampling(name: str) -> Any:
        return defaults[name] if name in defaults else field_default(SamplingParams, name)

    parser.add_argument("--max-tokens", type=int, default=sampling("max_tokens"))
    parser.add_argument("--temperature", type=float, default=sampling("temperature"))
    parser.add_argument("--top-p", type=float, default=sampling("top_p"))
    parser.add_argument("--top-k", type=int, default=sampling("top_k"))
    parser.add_argument("--min-p", type=float, default=sampling("min_p"))
    parser.add_argument("--seed", type=int, default=sampling("seed"))
    parser.add_argument("--stop", action="append", default=sampling("stop"),
                        help="stop string (repeatable)")


def sampling_params(args: argparse.Namespace) -> SamplingParams:
    """``SamplingParams`` from the flags of :func:`add_sampling_arguments`."""
    return SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                          top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
                          seed=args.seed, stop=args.stop)


def add_constraint_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--grammar", help="Lark grammar: a name in grammars/, a path, or text")
    group.add_argument("--regex", help="the output must match this regular expression")
    group.add_argument("--json-schema", help="path of a JSON schema file")
    group.add_argument("--choice", nargs="+", help="the output is exactly one of these")


def constraint_options(args: argparse.Namespace) -> dict:
    """The ``generate`` keywords of the constraint flag given, if any."""
    if args.json_schema:
        with open(args.json_schema) as f:
            return {"json_schema": f.read()}
    for key in ("grammar", "regex", "choice"):
        if getattr(args, key):
            return {key: getattr(args, key)}
    return {}
