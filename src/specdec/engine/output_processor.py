"""From sampled tokens to what callers see: stop checks, incremental text, outputs.

Per live request it owns the detokenizer (text, stop strings, held-back characters)
and the delta not yet reported (text and token ids since the request's last output).
"""

from __future__ import annotations

from specdec.core.messages import RequestSample
from specdec.core.request import Request
from specdec.detokenizer import IncrementalDetokenizer
from specdec.outputs import RequestMetrics, RequestOutput


class OutputProcessor:
    def __init__(self, tokenizer, eos_token_ids: frozenset[int]):
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.detokenizers: dict[str, IncrementalDetokenizer] = {}  # request id -> its text
        self.deltas: dict[str, tuple[str, list[int]]] = {}  # request id -> unreported output

    def add_request(self, req: Request) -> None:
        params = req.sampling_params
        self.detokenizers[req.request_id] = IncrementalDetokenizer(
            self.tokenizer,
            stop=params.stop,
            include_stop_str_in_output=params.include_stop_str_in_output,
            skip_special_tokens=params.skip_special_tokens,
        )

    def append_tokens(self, sample: RequestSample, now: float) -> tuple[list[int], str | None]:
        """Append the sampled tokens to the request's output up to the first that ends it
        (EOS, a stop token, ``max_tokens``), with their logprobs, and detokenize them.

        Returns the tokens kept and the finish reason (``"stop"`` also for a stop
        string), or None while the request goes on.
        """
        req = sample.request
        params = req.sampling_params
        if sample.logprobs:
            req.logprobs.extend(sample.logprobs)
        reason = None
        kept: list[int] = []
        for tok in sample.token_ids:
            kept.append(tok)
            req.output_token_ids.append(tok)
            is_eos = tok in self.eos_token_ids and not params.ignore_eos
            if is_eos or tok in params.stop_token_ids:
                reason = "stop"
            elif len(req.output_token_ids) >= params.max_tokens:
                reason = "length"
            if reason:
                break
        if req.logprobs and len(req.logprobs) > len(req.output_token_ids):
            del req.logprobs[len(req.output_token_ids) :]
        if req.first_token_time is None:
            req.first_token_time = now
        detok = self.detokenizers[req.request_id]
        self.deltas[req.request_id] = (detok.add_tokens(kept), kept)
        if detok.stopped_by is not None:
            reason = "stop"
        return kept, reason

    def finish(self, req: Request, reason: str) -> None:
        """The request ended: unless aborted, the text held back so far joins its delta."""
        detok = self.detokenizers[req.request_id]
        if reason != "abort":
            tail = detok.flush()
            text, tokens = self.deltas.get(req.request_id, ("", []))
            self.deltas[req.request_id] = (text + tail, tokens)

    def make_output(self, req: Request) -> RequestOutput:
        """The request's output so far and its delta since the last one."""
        detok = self.detokenizers[req.request_id]
        delta_text, delta_tokens = self.deltas.pop(req.request_id, ("", []))
        out = RequestOutput(
            request_id=req.request_id,
            prompt=req.prompt,
            prompt_token_ids=req.prompt_token_ids,
            text=detok.emitted_text,
            token_ids=list(req.output_token_ids),
            finish_reason=req.finish_reason,
            error=req.error,
            error_is_client=req.error_is_client,
            logprobs=list(req.logprobs) if req.sampling_params.logprobs is not None else None,
            metrics=RequestMetrics(
                arrival_time=req.arrival_time,
                first_token_time=req.first_token_time,
                finish_time=req.finish_time,
                num_generated_tokens=len(req.output_token_ids),
                num_cached_tokens=req.num_cached_prompt_tokens,
            ),
            delta_text=delta_text,
            delta_token_ids=delta_tokens,
        )
        return out

    def forget(self, request_id: str) -> None:
        """The request's final output was made: drop its text state."""
        self.detokenizers.pop(request_id, None)
