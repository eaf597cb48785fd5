"""``POST /v1/chat/completions``: messages through the model's chat template."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from specdec.outputs import RequestOutput
from specdec.server.errors import BadRequestError
from specdec.server.logprobs import chat_logprobs, delta_logprobs
from specdec.server.protocol import ChatCompletionRequest
from specdec.server.sampling import sampling_params
from specdec.server.state import State
from specdec.server.streaming import admit, final_output, finish_reason, sse_events, usage

router = APIRouter()


def render_chat(tokenizer, body: ChatCompletionRequest) -> str:
    """The prompt text; the engine tokenizes it (special tokens in it are recognised)."""
    if not body.messages:
        raise BadRequestError("messages must not be empty", param="messages")
    if body.tools:
        raise BadRequestError("tools are not supported", param="tools")
    if not tokenizer.chat_template:
        raise BadRequestError("this model has no chat template; use /v1/completions")
    try:
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=body.add_generation_prompt,
            **(body.chat_template_kwargs or {}),
        )
    except Exception as exc:  # noqa: BLE001 - template errors (e.g. role order) are user errors
        raise BadRequestError(f"cannot apply the chat template: {exc}",
                              param="messages") from None


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 state: State):
    state.check_model(body.model)
    tok = state.tokenizer
    prompt = render_chat(tok, body)
    max_tokens = body.max_tokens
    if body.max_completion_tokens is not None:
        max_tokens = body.max_completion_tokens
    top_n = body.top_logprobs or 0
    params = sampling_params(body, 1 if max_tokens is None else max_tokens,
                             top_n if body.logprobs else None, state.request_options)
    stream = await admit(state.engine, state.metrics, prompt, params, "chatcmpl",
                         fill_max_tokens=max_tokens is None)
    created, completion_id = int(time.time()), f"chatcmpl-{uuid.uuid4().hex}"
    head = {"id": completion_id, "object": "chat.completion", "created": created,
            "model": state.model_name}

    if not body.stream:
        out = await final_output(state.engine, stream, request)
        lps = chat_logprobs(tok, out.token_ids, out.logprobs or [], top_n) \
            if body.logprobs else None
        choice = {"index": 0, "message": {"role": "assistant", "content": out.text},
                  "logprobs": lps, "finish_reason": finish_reason(out)}
        return {**head, "choices": [choice], "usage": usage(stream, out)}

    chunk_head = {**head, "object": "chat.completion.chunk"}
    first = [True]

    def chunks(out: RequestOutput) -> list[dict]:
        result = []
        if first[0]:
            first[0] = False
            result.append({**chunk_head, "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""},
                 "logprobs": None, "finish_reason": None}]})
        if out.delta_text or out.finished:
            lps = chat_logprobs(tok, out.delta_token_ids, delta_logprobs(out), top_n) \
                if body.logprobs else None
            delta = {"content": out.delta_text} if out.delta_text else {}
            result.append({**chunk_head, "choices": [
                {"index": 0, "delta": delta, "logprobs": lps,
                 "finish_reason": finish_reason(out)}]})
        return result

    include_usage = body.stream_options is not None and body.stream_options.include_usage
    usage_chunk = (lambda out: {**chunk_head, "choices": [], "usage": usage(stream, out)}) \
        if include_usage else None
    return StreamingResponse(sse_events(state.engine, stream, chunks, usage_chunk),
                             media_type="text/event-stream")
