"""One streamed request against an OpenAI-compatible server, timed chunk by chunk.

Definitions (as in ``vllm bench serve``):

- TTFT: request sent -> first chunk with text;
- ITL: gap between consecutive text chunks (a chunk may carry several tokens when the
  server speculates, so ITL is per chunk, TPOT per token);
- TPOT: (e2e - TTFT) / (output tokens - 1);
- e2e: request sent -> last byte.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx


@dataclass
class RequestResult:
    ok: bool
    ttft: float = 0.0
    e2e: float = 0.0
    itls: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    error: str = ""

    @property
    def tpot(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


async def stream_request(client: httpx.AsyncClient, url: str, body: dict) -> RequestResult:
    """POST ``body`` with ``stream`` on; parse the SSE events as they arrive."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    last = None
    result = RequestResult(ok=False)
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    result.error = event["error"]["message"]
                    return result
                if event.get("usage"):
                    result.prompt_tokens = event["usage"]["prompt_tokens"]
                    result.output_tokens = event["usage"]["completion_tokens"]
                if _chunk_text(event):
                    now = time.perf_counter()
                    if last is None:
                        result.ttft = now - start
                    else:
                        result.itls.append(now - last)
                    last = now
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    result.e2e = time.perf_counter() - start
    result.ok = last is not None
    if not result.ok:
        result.error = "no text received"
    return result


def _chunk_text(event: dict) -> str:
    choices = event.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    return choice.get("text") or (choice.get("delta") or {}).get("content") or ""
