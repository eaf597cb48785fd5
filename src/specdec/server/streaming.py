"""Shared by both endpoints: admit a request, wait for its answer or stream it as SSE.

Client disconnects abort the request, so its KV blocks go back to the pool at once:

- streaming: Starlette cancels the response's generator when the client goes away; the
  generator's ``finally`` aborts the request if it has not finished;
- non-streaming: a watcher task polls ``request.is_disconnected()`` while the handler
  waits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request

from specdec.outputs import RequestOutput
from specdec.sampling_params import SamplingParams
from specdec.server.async_engine import AsyncEngine
from specdec.server.errors import APIError, BadRequestError
from specdec.server.metrics import ServerMetrics
from specdec.server.request_stream import RequestStream
from specdec.structured.errors import ConstraintError

DISCONNECT_POLL_S = 0.25


class GenerationError(APIError):
    """The request was admitted but failed while generating (a plugin error)."""

    status_code = 500
    error_type = "server_error"


async def admit(engine: AsyncEngine, metrics: ServerMetrics, prompt: list[int],
                params: SamplingParams, prefix: str, fill_max_tokens: bool,
                constraint_param: Callable[[], str | None] | None = None) -> RequestStream:
    """Queue the request; the engine's refusal (bad prompt, constraint...) becomes a 400,
    naming the body field ``constraint_param()`` gives when the constraint is what was
    refused (looked up then only: it re-reads the body's constraint fields)."""
    try:
        return await engine.add(prompt, params, prefix, fill_max_tokens=fill_max_tokens)
    except ValueError as exc:
        metrics.request_rejected()
        message, param = str(exc), None
        if isinstance(exc, ConstraintError) and constraint_param is not None:
            param = constraint_param()
            if param is not None and param not in message:
                message = f"{param}: {message}"
        raise BadRequestError(message, param=param) from None


async def final_output(engine: AsyncEngine, stream: RequestStream,
                       http_request: Request) -> RequestOutput:
    """The finished output, its deltas joined; aborts the request if the client leaves."""
    watcher = asyncio.create_task(_abort_on_disconnect(engine, stream, http_request))
    last: RequestOutput | None = None
    texts: list[str] = []
    token_ids: list[int] = []
    logprobs: list[dict[int, float]] = []
    try:
        async for out in stream:
            last = out
            texts.append(out.text)
            token_ids.extend(out.token_ids)
            logprobs.extend(out.logprobs or [])
    finally:
        watcher.cancel()
        if last is None or not last.finished:
            engine.abort(stream.request_id)
    if last.finish_reason == "error":
        if last.error_is_client:
            raise BadRequestError(last.error or "the request was refused")
        raise GenerationError(last.error or "generation failed")
    return dataclasses.replace(last, text="".join(texts), token_ids=token_ids,
                               logprobs=None if last.logprobs is None else logprobs)


async def _abort_on_disconnect(engine: AsyncEngine, stream: RequestStream,
                               http_request: Request) -> None:
    while not stream.finished:
        await asyncio.sleep(DISCONNECT_POLL_S)
        if await http_request.is_disconnected():
            engine.abort(stream.request_id)
            return


def usage(stream: RequestStream, out: RequestOutput) -> dict[str, int]:
    generated = stream.num_generated
    return {"prompt_tokens": stream.num_prompt_tokens, "completion_tokens": generated,
            "total_tokens": stream.num_prompt_tokens + generated}


def finish_reason(out: RequestOutput) -> str | None:
    return None if out.finish_reason is None else {"abort": "stop"}.get(out.finish_reason,
                                                                         out.finish_reason)


async def sse_events(engine: AsyncEngine, stream: RequestStream,
                     chunks: Callable[[RequestOutput], list[dict[str, Any]]],
                     usage_chunk: Callable[[RequestOutput], dict[str, Any]] | None,
                     ) -> AsyncIterator[str]:
    """``data: {...}`` events for each engine output, then ``data: [DONE]``.

    ``chunks(out)`` turns one output into zero or more chunk objects; ``usage_chunk``
    (when the client asked ``stream_options.include_usage``) makes the last one.
    """
    last: RequestOutput | None = None
    try:
        async for out in stream:
            last = out
            if out.finish_reason == "error":
                kind = "invalid_request_error" if out.error_is_client else "server_error"
                body = {"error": {"message": out.error or "generation failed",
                                  "type": kind, "param": None, "code": None}}
                yield _event(body)
                break
            for chunk in chunks(out):
                yield _event(chunk)
        if usage_chunk is not None and last is not None:
            yield _event(usage_chunk(last))
        yield "data: [DONE]\n\n"
    finally:
        if last is None or not last.finished:
            engine.abort(stream.request_id)


def _event(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"
