"""``POST /v1/chat/completions``: messages through the model's chat template.

The template is rendered and the prompt tokenized in the prompt workers
(:mod:`~specdec.server.prompts`); the engine receives token ids.
"""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from specdec.outputs import RequestOutput
from specdec.server.errors import BadRequestError
from specdec.server.logprobs import chat_logprobs, delta_logprobs
from specdec.server.prompts import PromptPreparer, check_text
from specdec.server.protocol import ChatCompletionRequest
from specdec.server.sampling import sampling_params
from specdec.server.state import State
from specdec.server.streaming import admit, final_output, finish_reason, sse_events, usage
from specdec.server.structured_outputs import constraint_field
from specdec.server.validation import check_unicode

router = APIRouter()


async def chat_prompt(prompts: PromptPreparer, body: ChatCompletionRequest) -> list[int]:
    """The prompt's token ids (special tokens in the rendered text are recognised)."""
    if not body.messages:
        raise BadRequestError("messages must not be empty", param="messages")
    if body.tools:
        raise BadRequestError("tools are not supported", param="tools")
    messages = []
    for i, m in enumerate(body.messages):
        try:
            text = m.text()
        except ValueError as exc:
            raise BadRequestError(str(exc), param=f"messages[{i}].content") from None
        check_text(text, f"messages[{i}].content")
        messages.append({"role": m.role, "content": text})
    kwargs = dict(body.chat_template_kwargs or {})
    template = kwargs.pop("chat_template", None)
    if body.chat_template is not None:
        template = body.chat_template
    if template is not None and not isinstance(template, str):
        raise BadRequestError("chat_template must be a string", param="chat_template")
    text = await prompts.render_chat(messages, body.add_generation_prompt, kwargs, template)
    return await prompts.tokenize(text, "messages")


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 state: State):
    state.check_model(body.model)
    check_unicode(body)
    tok = state.tokenizer
    max_tokens = body.max_tokens
    if body.max_completion_tokens is not None:
        max_tokens = body.max_completion_tokens
    top_n = body.top_logprobs or 0
    params = sampling_params(body, 1 if max_tokens is None else max_tokens,
                             top_n if body.logprobs else None, state.request_options)
    prompt = await chat_prompt(state.prompts, body)
    stream = await admit(state.engine, state.metrics, prompt, params, "chatcmpl",
                         fill_max_tokens=max_tokens is None,
                         constraint_param=lambda: constraint_field(body))
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
