"""``specdec`` command line: generate, bench."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from specdec.bench import BENCHMARKS


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="local HF dir or .gguf (default: SmolLM2)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument("--no-fused-kernels", action="store_true",
                        help="plain eager PyTorch: no C++ kernels, no pre-packed weights")
    parser.add_argument("--speculative-method", choices=["ngram", "draft"], default=None)
    parser.add_argument("--num-speculative-tokens", type=int, default=4)
    parser.add_argument("--prompt-lookup-min", type=int, default=2, help="n-gram: shortest match")
    parser.add_argument("--prompt-lookup-max", type=int, default=5, help="n-gram: longest match")
    parser.add_argument("--draft-model", default=None, help="draft model path (default: an "
                        "int8 weight-only copy of the target)")
    parser.add_argument("--draft-quantization", choices=["int8", "none"], default="int8")


def engine_kwargs(args: argparse.Namespace) -> dict:
    return dict(
        model=args.model,
        dtype=args.dtype,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enable_prefix_caching=not args.no_prefix_caching,
        fused_kernels=not args.no_fused_kernels,
        speculative=speculative_options(args),
    )


def speculative_options(args: argparse.Namespace) -> dict | None:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate text for one prompt")
    gen.add_argument("prompt")
    gen.add_argument("--max-tokens", type=int, default=128)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=-1)
    gen.add_argument("--min-p", type=float, default=0.0)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    gen.add_argument("--chat", action="store_true", help="apply the chat template")
    gen.add_argument("--json", action="store_true", help="print a JSON record, not just text")
    add_constraint_arguments(gen)
    add_engine_arguments(gen)

    bench = sub.add_parser("bench", help="benchmarks against a peer, same run")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for name, module in BENCHMARKS.items():
        p = bench_sub.add_parser(name)
        add_engine_arguments(p)
        importlib.import_module(module).add_arguments(p)
    add_serve_parser(sub)
    return parser


def add_serve_parser(sub) -> None:
    from specdec.server import serve

    serve_parser = sub.add_parser("serve", help="OpenAI-compatible HTTP server")
    add_engine_arguments(serve_parser)
    serve.add_arguments(serve_parser)


def cmd_serve(args: argparse.Namespace) -> int:
    from specdec.server import serve

    return serve.main(args, engine_kwargs(args))


def add_constraint_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--grammar", help="Lark grammar: a name in grammars/, a path, or text")
    group.add_argument("--regex", help="the output must match this regular expression")
    group.add_argument("--json-schema", help="path of a JSON schema file")
    group.add_argument("--choice", nargs="+", help="the output is exactly one of these")


def constraint_options(args: argparse.Namespace) -> dict:
    if args.json_schema:
        with open(args.json_schema) as f:
            return {"json_schema": f.read()}
    for key in ("grammar", "regex", "choice"):
        if getattr(args, key):
            return {key: getattr(args, key)}
    return {}


def cmd_generate(args: argparse.Namespace) -> int:
    from specdec import LLM, SamplingParams

    params = SamplingParams(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        seed=args.seed,
        stop=args.stop,
    )
    llm = LLM(**engine_kwargs(args))
    options = constraint_options(args)
    if args.chat:
        out = llm.chat([{"role": "user", "content": args.prompt}], params, **options)[0]
    else:
        out = llm.generate(args.prompt, params, **options)[0]
    if args.json:
        print(json.dumps({"text": out.text, "finish_reason": out.finish_reason,
                          "num_tokens": len(out.token_ids), "ttft_s": out.metrics.ttft,
                          "mean_itl_s": out.metrics.mean_itl}))
    else:
        print(out.text)
    return 0 if out.finish_reason != "error" else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "generate":
            return cmd_generate(args)
        if args.command == "serve":
            return cmd_serve(args)
        importlib.import_module(BENCHMARKS[args.bench]).main(args)
        return 0
    except (ValueError, FileNotFoundError) as exc:
        print(f"specdec: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
