"""Server metrics in the Prometheus text exposition format (``GET /metrics``).

Kept by the server (event loop only, so no locks):

- ``specdec_requests_total{outcome}``: finished requests by finish reason (``stop``,
  ``length``, ``abort``, ``error``) plus ``rejected`` (refused with a 4xx at admission);
- histograms ``specdec_time_to_first_token_seconds``, ``specdec_inter_token_latency_seconds``
  (each request's mean gap between tokens) and ``specdec_e2e_request_latency_seconds``.

Read from ``engine.stats()`` at scrape time: prompt / generation token counters, KV
block usage, running / waiting requests, and every numeric stat a plugin adds (prefix
cache hit rate, speculation acceptance...) as ``specdec_engine_<name>``.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

from specdec.outputs import RequestOutput

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                   7.5, 10.0, 20.0, 40.0, 80.0)
OUTCOMES = ("stop", "length", "abort", "error", "rejected")


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...] = LATENCY_BUCKETS):
        self.name, self.help_text, self.buckets = name, help_text, buckets
        self.counts = [0] * (len(buckets) + 1)  # last: +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help_text}", f"# TYPE {self.name} histogram"]
        cumulative = 0
        for bound, count in zip((*self.buckets, math.inf), self.counts, strict=True):
            cumulative += count
            le = "+Inf" if bound == math.inf else repr(bound)
            lines.append(f'{self.name}_bucket{{le="{le}"}} {cumulative}')
        lines += [f"{self.name}_sum {self.sum}", f"{self.name}_count {cumulative}"]
        return lines


class ServerMetrics:
    def __init__(self) -> None:
        self.requests = dict.fromkeys(OUTCOMES, 0)
        self.ttft = Histogram("specdec_time_to_first_token_seconds", "Time to first token.")
        self.itl = Histogram("specdec_inter_token_latency_seconds",
                             "Mean gap between output tokens, one observation per request.")
        self.e2e = Histogram("specdec_e2e_request_latency_seconds",
                             "Arrival to finish, per request.")

    def request_finished(self, out: RequestOutput) -> None:
        reason = out.finish_reason or "error"
        self.requests[reason] = self.requests.get(reason, 0) + 1
        for histogram, value in ((self.ttft, out.metrics.ttft), (self.itl, out.metrics.mean_itl),
                                 (self.e2e, out.metrics.e2e)):
            if value is not None:
                histogram.observe(value)

    def request_rejected(self) -> None:
        self.requests["rejected"] += 1

    def render(self, engine_stats: dict[str, Any]) -> str:
        lines = ["# HELP specdec_requests_total Requests by outcome.",
                 "# TYPE specdec_requests_total counter"]
        lines += [f'specdec_requests_total{{outcome="{k}"}} {v}' for k, v in self.requests.items()]
        lines += _counter("specdec_prompt_tokens_total", "Prompt tokens admitted.",
                          engine_stats.get("prompt_tokens", 0))
        lines += _counter("specdec_generation_tokens_total", "Tokens generated.",
                          engine_stats.get("generation_tokens", 0))
        total = engine_stats.get("kv_blocks_total") or 0
        used = engine_stats.get("kv_blocks_used", 0)
        lines += _gauge("specdec_kv_cache_usage_ratio", "Fraction of KV blocks in use.",
                        used / total if total else 0.0)
        for histogram in (self.ttft, self.itl, self.e2e):
            lines += histogram.render()
        for key, value in sorted(engine_stats.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                name = "specdec_engine_" + "".join(c if c.isalnum() else "_" for c in key)
                lines += _gauge(name, f"engine.stats()['{key}']", value)
        return "\n".join(lines) + "\n"


def _counter(name: str, help_text: str, value: float) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {value}"]


def _gauge(name: str, help_text: str, value: float) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value}"]
