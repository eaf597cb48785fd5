"""The CPU peer: llama.cpp (``llama-cpp-python``) on the same GGUF file, prompts and threads.

Installed for benchmarks only (it builds from source, ~8 min on 2 cores):
``pip install llama-cpp-python``. Each prompt runs alone, greedy or sampled with
specdec's settings; TTFT is the time to the
first generated token, ITL the mean time per token after it, as for specdec.

It runs in a child process: a llama.cpp built for another CPU (pip caches the wheel it
built by version, not by CPU, and ggml builds for the native one) dies of an illegal
instruction, which must cost the benchmark its peer, not its run.
"""

from __future__ import annotations

import multiprocessing
import signal
import statistics
import time
from pathlib import Path

REBUILD = "pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python"


def llamacpp_latency(path: Path, prompts: list[list[int]], max_tokens: int, threads: int,
                     ignore_eos: bool, repeats: int = 1, sampling: dict | None = None) -> dict:
    """TTFT / ITL of llama.cpp, measured in a child process; ``{"status": ...}`` alone
    when it is not installed or the child died."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_measure_into, daemon=True,
                            args=(send, path, prompts, max_tokens, threads, ignore_eos,
                                  repeats, sampling))
    child.start()
    send.close()
    try:
        result = receive.recv()
    except EOFError:  # the child died before answering
        result = None
    child.join()
    if result is not None:
        return result
    code = child.exitcode
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        hint = (f": built for another CPU? rebuild it here with `{REBUILD}`"
                if -code == signal.SIGILL else "")
        return {"status": f"crashed ({name}){hint}"}
    return {"status": f"exited with code {code} before answering"}


def _measure_into(send, *args) -> None:
    try:
        send.send(_measure(*args))
    except Exception as exc:  # reported as the peer's status, in the parent
        send.send({"status": f"failed: {type(exc).__name__}: {exc}"})
    finally:
        send.close()


def _measure(path: Path, prompts: list[list[int]], max_tokens: int, threads: int,
             ignore_eos: bool, repeats: int, sampling: dict | None) -> dict:
    try:
        from llama_cpp import Llama
    except ImportError:
        return {"status": "not installed (pip install llama-cpp-python)"}
    import llama_cpp

    n_ctx = max(2048, max(len(p) for p in prompts) + max_tokens + 8)
    started = time.perf_counter()
    llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                n_batch=512, verbose=False)
    load_s = time.perf_counter() - started
    eos = llm.token_eos()
    options = sampling or {"temp": 0.0, "top_k": 1}  # Llama.generate's keywords; greedy
    outputs: list[list[int]] = []

    def run(prompt: list[int]) -> tuple[float, float, int]:
        start = time.perf_counter()
        first = None
        tokens: list[int] = []
        for token in llm.generate(prompt, reset=True, **options):
            if first is None:
                first = time.perf_counter()
            if token == eos and not ignore_eos:
                break
            tokens.append(token)
            if len(tokens) >= max_tokens:
                break
        end = time.perf_counter()
        outputs.append(tokens)
        return first - start, end - first, len(tokens)

    run(prompts[0][:8])  # warm-up
    outputs.clear()
    ttfts, decode_s, decode_tokens = [], 0.0, 0
    for _ in range(repeats):
        for prompt in prompts:
            ttft, decode, count = run(prompt)
            ttfts.append(ttft)
            decode_s += decode
            decode_tokens += max(count - 1, 0)
    itl = decode_s / max(decode_tokens, 1)
    return {"status": "ok", "version": llama_cpp.__version__, "threads": threads, "load_s": load_s,
            "ttft_ms": 1e3 * statistics.median(ttfts), "itl_ms": 1e3 * itl, "tok_s": 1 / itl,
            "outputs": outputs}
