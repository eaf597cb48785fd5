"""``POST /v1/completions``: text in, text out (streamed as SSE when ``stream``)."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from specdec.outputs import RequestOutput
from specdec.server.errors import BadRequestError
from specdec.server.logprobs import completion_logprobs, delta_logprobs
from specdec.server.protocol import CompletionRequest
from specdec.server.sampling import sampling_params
from specdec.server.state import State
from specdec.server.streaming import admit, final_output, finish_reason, sse_events, usage
from specdec.server.structured_outputs import constraint_field
from specdec.server.validation import check_unicode

router = APIRouter()


def single_prompt(prompt) -> str | list[int]:
    """A string, a list of token ids, or a one-element batch of either."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise BadRequestError("batched prompts are not supported; send one prompt per "
                                  "request", param="prompt")
        prompt = prompt[0]
    if not prompt:
        raise BadRequestError("prompt is empty", param="prompt")
    return prompt


@router.post("/v1/completions")
async def create_completion(body: CompletionRequest, request: Request,
                            state: State):
    state.check_model(body.model)
    check_unicode(body)
    if body.echo or body.suffix:
        raise BadRequestError("echo and suffix are not supported", param="echo")
    prompt = single_prompt(body.prompt)
    max_tokens = 16 if body.max_tokens is None else body.max_tokens  # OpenAI's default
    params = sampling_params(body, max_tokens, body.logprobs, state.request_options)
    if isinstance(prompt, str):
        prompt = await state.prompts.tokenize(prompt, "prompt")
    stream = await admit(state.engine, state.metrics, prompt, params, "cmpl", False,
                         constraint_param=lambda: constraint_field(body))
    created, completion_id = int(time.time()), f"cmpl-{uuid.uuid4().hex}"
    head = {"id": completion_id, "object": "text_completion", "created": created,
            "model": state.model_name}
    tok = state.tokenizer

    if not body.stream:
        out = await final_output(state.engine, stream, request)
        lps = None
        if body.logprobs is not None:
            lps = completion_logprobs(tok, out.token_ids, out.logprobs or [])
        choice = {"index": 0, "text": out.text, "logprobs": lps,
                  "finish_reason": finish_reason(out)}
        return {**head, "choices": [choice], "usage": usage(stream, out)}

    sent_chars = [0]

    def chunks(out: RequestOutput) -> list[dict]:
        if not out.delta_text and not out.finished:
            return []
        lps = None
        if body.logprobs is not None:
            lps = completion_logprobs(tok, out.delta_token_ids, delta_logprobs(out),
                                      sent_chars[0])
        sent_chars[0] += len(out.delta_text)
        choice = {"index": 0, "text": out.delta_text, "logprobs": lps,
                  "finish_reason": finish_reason(out)}
        return [{**head, "choices": [choice]}]

    include_usage = body.stream_options is not None and body.stream_options.include_usage
    usage_chunk = (lambda out: {**head, "choices": [], "usage": usage(stream, out)}) \
        if include_usage else None
    return StreamingResponse(sse_events(state.engine, stream, chunks, usage_chunk),
                             media_type="text/event-stream")
