"""``specdec bench serve``: load a running server like ``vllm bench serve``.

Sends the JSON-extraction workload (:mod:`specdec.bench.workload`) to ``--base-url``
with Poisson arrivals at each ``--request-rate`` (``inf``: all at once), optionally
capped by ``--max-concurrency``, and reports TTFT, TPOT, ITL and e2e latency (mean,
median, p99) and request / token throughput per rate. ``--result-json`` writes every
run; ``--plot`` draws latency against throughput over the rates. Example::

    specdec serve &                                  # default model on :8000
    specdec bench serve --request-rate 1 2 4 inf --plot serve.png
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from specdec.bench.serve_client import RequestResult, stream_request
from specdec.bench.serve_report import plot, print_summary, summarize
from specdec.bench.workload import extraction_prompts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    parser.add_argument("--served-model-name", default=None,
                        help="model id to send (default: the first of /v1/models)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--request-rate", type=float, nargs="+", default=[float("inf")],
                        help="requests/s, Poisson arrivals; several values = several runs")
    parser.add_argument("--max-concurrency", type=int, default=None)
    parser.add_argument("--json-output", action="store_true",
                        help="ask for response_format json_object (structured outputs)")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="always generate --max-tokens tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--result-json", default=None)
    parser.add_argument("--plot", default=None, help="PNG path: latency vs throughput")


def request_bodies(args: argparse.Namespace, model: str) -> list[dict]:
    bodies = []
    for prompt in extraction_prompts(args.num_prompts):
        body: dict = {"model": model, "max_tokens": args.max_tokens, "temperature": 0.0}
        if args.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if args.json_output:
            body["response_format"] = {"type": "json_object"}
        if args.ignore_eos:
            body["ignore_eos"] = True
        bodies.append(body)
    return bodies


async def run_at_rate(client, url: str, bodies: list[dict], rate: float,
                      max_concurrency: int | None, rng: random.Random):
    """Send every body with exponential gaps of mean 1/rate; returns (results, seconds)."""
    limit = asyncio.Semaphore(max_concurrency or len(bodies))

    async def one(body: dict) -> RequestResult:
        async with limit:
            return await stream_request(client, url, body)

    tasks = []
    start = time.perf_counter()
    for body in bodies:
        tasks.append(asyncio.create_task(one(body)))
        if rate != float("inf"):
            await asyncio.sleep(rng.expovariate(rate))
    results = await asyncio.gather(*tasks)
    return results, time.perf_counter() - start


async def run(args: argparse.Namespace) -> list[dict]:
    import httpx

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    # No keep-alive reuse: a pooled connection idle past the server's keep-alive timeout
    # (uvicorn: 5 s) can be closed under a new request and fail it with a ReadError.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=args.base_url, headers=headers, limits=limits,
                                 timeout=httpx.Timeout(600.0)) as client:
        model = args.served_model_name
        if model is None:
            response = await client.get("/v1/models")
            response.raise_for_status()
            model = response.json()["data"][0]["id"]
        path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
        bodies = request_bodies(args, model)
        await stream_request(client, path, {**bodies[0], "max_tokens": 4})  # warm-up
        runs = []
        for rate in args.request_rate:
            rng = random.Random(args.seed)
            results, duration = await run_at_rate(client, path, bodies, rate,
                                                  args.max_concurrency, rng)
            summary = summarize(results, duration)
            summary.update(request_rate=rate, max_concurrency=args.max_concurrency,
                           endpoint=args.endpoint, model=model, num_prompts=len(bodies),
                           max_tokens=args.max_tokens, json_output=args.json_output,
                           errors=sorted({r.error for r in results if not r.ok})[:5])
            print_summary(f"rate {rate} req/s, concurrency {args.max_concurrency or 'max'}",
                          summary)
            runs.append(summary)
        return runs


def main(args: argparse.Namespace) -> dict:
    runs = asyncio.run(run(args))
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(runs, f, indent=2, default=str)
    if args.plot:
        plot(runs, args.plot)
        print(f"plot: {args.plot}")
    return {"runs": runs}
