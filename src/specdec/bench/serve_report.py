"""Summaries of a ``bench serve`` run, and the latency-vs-throughput plot."""

from __future__ import annotations

import statistics

from specdec.bench.serve_client import RequestResult
from specdec.bench.workload import percentile


def summarize(results: list[RequestResult], duration: float) -> dict:
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    summary = {
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "duration_s": duration,
        "request_throughput": len(ok) / duration,
        "output_token_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
    }
    series = {
        "ttft": [r.ttft for r in ok],
        "tpot": [t for r in ok if (t := r.tpot) is not None],
        "itl": [gap for r in ok for gap in r.itls],
        "e2el": [r.e2e for r in ok],
    }
    for name, values in series.items():
        ms = [v * 1000 for v in values]
        summary[f"mean_{name}_ms"] = statistics.fmean(ms) if ms else float("nan")
        summary[f"median_{name}_ms"] = statistics.median(ms) if ms else float("nan")
        summary[f"p99_{name}_ms"] = percentile(ms, 99)
    return summary


def print_summary(label: str, s: dict) -> None:
    print(f"============ Serving benchmark ({label}) ============")
    print(f"Successful requests: {s['completed']}   failed: {s['failed']}")
    for error in s.get("errors", []):
        print(f"  failure: {error}")
    print(f"Benchmark duration (s): {s['duration_s']:.2f}")
    print(f"Request throughput (req/s): {s['request_throughput']:.2f}")
    print(f"Output token throughput (tok/s): {s['output_token_throughput']:.1f}")
    print(f"Total token throughput (tok/s): {s['total_token_throughput']:.1f}")
    for name, title in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E")):
        print(f"{title:>5} ms   mean {s[f'mean_{name}_ms']:8.1f}   median "
              f"{s[f'median_{name}_ms']:8.1f}   p99 {s[f'p99_{name}_ms']:8.1f}")


def plot(runs: list[dict], path: str) -> None:
    """Median and p99 TTFT, TPOT and e2e latency against output token throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    xs = [r["output_token_throughput"] for r in runs]
    for ax, (name, title) in zip(axes, (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2E")),
                                 strict=True):
        for stat, style in (("median", "o-"), ("p99", "s--")):
            ax.plot(xs, [r[f"{stat}_{name}_ms"] for r in runs], style, label=stat)
        for r, x in zip(runs, xs, strict=True):
            ax.annotate(str(r["request_rate"]), (x, r[f"median_{name}_ms"]), fontsize=7,
                        textcoords="offset points", xytext=(3, 3))
        ax.set(title=f"{title} (labels: request rate)", xlabel="output tokens/s",
               ylabel="ms")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
