"""``specdec`` command line: generate, serve, bench.

The flags shared with the server and the benchmarks are in :mod:`specdec.cli.options`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from specdec.cli.options import (
    GENERATE_SAMPLING_DEFAULTS,
    add_constraint_arguments,
    add_engine_arguments,
    add_sampling_arguments,
    constraint_options,
    engine_kwargs,
    sampling_params,
)

__all__ = ["build_parser", "engine_kwargs", "main"]


def build_parser() -> argparse.ArgumentParser:
    from specdec.bench import BENCHMARKS

    parser = argparse.ArgumentParser(prog="specdec")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate text for one prompt")
    gen.add_argument("prompt")
    add_sampling_arguments(gen, **GENERATE_SAMPLING_DEFAULTS)
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

    return serve.main(args)


def cmd_generate(args: argparse.Namespace) -> int:
    from specdec import LLM

    params = sampling_params(args)
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
    from specdec.bench import BENCHMARKS

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
