"""Which requests the engine accepts: known options, a prompt of valid tokens, and a
prompt + ``max_tokens`` that fits both the model's context and the KV pool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdec.core.kv_cache_manager import KVCacheManager
from specdec.sampling_params import SamplingParams


class RequestRejectedError(ValueError):
    """A request cannot be served (bad prompt, too long, rejected by a plugin)."""


@dataclass
class RequestValidator:
    tokenizer: Any  # the HF tokenizer that encodes text prompts
    vocab_size: int  # token ids must lie in [0, vocab_size)
    max_model_len: int  # longest prompt + output
    kv: KVCacheManager  # the pool a request must fit in on its own
    request_options: frozenset[str]  # SamplingParams.extra keys some plugin claims

    def prompt_tokens(self, prompt: str | list[int],
                      params: SamplingParams) -> tuple[str | None, list[int]]:
        """The prompt's text (None for token ids) and token ids; raises
        :class:`RequestRejectedError` for a request that cannot be served."""
        unknown = set(params.extra) - self.request_options
        if unknown:
            raise RequestRejectedError(
                f"unknown request option(s) {sorted(unknown)}; plugins accept "
                f"{sorted(self.request_options) or 'none'}"
            )
        if isinstance(prompt, str):
            if not prompt:
                raise RequestRejectedError("prompt is empty")
            text, token_ids = prompt, self.tokenizer.encode(prompt, add_special_tokens=False)
        else:
            text, token_ids = None, [int(t) for t in prompt]
            bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
            if bad:
                raise RequestRejectedError(
                    f"prompt token ids out of range [0, {self.vocab_size}): {bad[:5]}"
                )
        if not token_ids:
            raise RequestRejectedError("prompt is empty (no tokens)")
        self.check_fits(len(token_ids), params.max_tokens)
        return text, token_ids

    def check_fits(self, num_prompt: int, max_tokens: int) -> None:
        total = num_prompt + max_tokens
        if num_prompt >= self.max_model_len:
            raise RequestRejectedError(
                f"prompt has {num_prompt} tokens but the model's context is "
                f"{self.max_model_len} tokens"
            )
        if total > self.max_model_len:
            raise RequestRejectedError(
                f"prompt ({num_prompt} tokens) + max_tokens ({max_tokens}) = {total} exceeds "
                f"the model's context of {self.max_model_len} tokens; lower max_tokens"
            )
        needed = self.kv.blocks_needed(total)
        if needed > self.kv.num_blocks:
            raise RequestRejectedError(
                f"prompt ({num_prompt} tokens) + max_tokens ({max_tokens}) needs {needed} KV "
                f"blocks but the pool has only {self.kv.num_blocks}; raise kv_cache_memory_gb "
                "or num_kv_blocks, or lower max_tokens"
            )
