"""Engine logprobs (one ``{token_id: logprob}`` dict per output token: the sampled token
and the top-n) in the two OpenAI shapes: legacy completions and chat ``content``."""

from __future__ import annotations

import math
from typing import Any

from specdec.sample.sampler import LOGPROB_FLOOR


def completion_logprobs(tokenizer, token_ids: list[int], logprobs: list[dict[int, float]],
                        text_offset: int = 0) -> dict[str, Any]:
    """``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`` for these tokens."""
    tokens, token_lps, tops, offsets = [], [], [], []
    for tok, lps in zip(token_ids, logprobs, strict=False):
        text = tokenizer.decode([tok])
        tokens.append(text)
        token_lps.append(_finite(lps.get(tok, LOGPROB_FLOOR)))
        tops.append({tokenizer.decode([t]): _finite(lp) for t, lp in lps.items()})
        offsets.append(text_offset)
        text_offset += len(text)
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops,
            "text_offset": offsets}


def chat_logprobs(tokenizer, token_ids: list[int], logprobs: list[dict[int, float]],
                  top_n: int) -> dict[str, Any]:
    """``{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}``."""
    content = []
    for tok, lps in zip(token_ids, logprobs, strict=False):
        top = sorted(lps.items(), key=lambda kv: kv[1], reverse=True)[:top_n]
        content.append({**_entry(tokenizer, tok, lps.get(tok, LOGPROB_FLOOR)),
                        "top_logprobs": [_entry(tokenizer, t, lp) for t, lp in top]})
    return {"content": content}


def _entry(tokenizer, tok: int, logprob: float) -> dict[str, Any]:
    text = tokenizer.decode([tok])
    return {"token": text, "logprob": _finite(logprob), "bytes": list(text.encode())}


def _finite(logprob: float) -> float:
    """JSON has no -Infinity: an impossible token is reported at the floor, like OpenAI."""
    return logprob if math.isfinite(logprob) else LOGPROB_FLOOR


def delta_logprobs(out) -> list[dict[int, float]]:
    """The logprobs of the tokens this output added (the last ``len(delta_token_ids)``)."""
    n = len(out.delta_token_ids)
    return (out.logprobs or [])[len(out.logprobs or []) - n:] if n else []
