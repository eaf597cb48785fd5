"""Prompt preparation off the event loop and off the engine thread.

Chat templates are rendered and prompts tokenized in a small thread pool; the engine
only ever receives token ids. Before tokenizing, a prompt whose character count
cannot fit the context is refused at once (see :func:`max_prompt_chars`), so a huge
prompt costs neither tokenizer time nor memory.

A chat template sent by the client (``chat_template``, top level or in
``chat_template_kwargs``) is refused unless the server trusts request templates; then
it is rendered by :mod:`~specdec.server.template_sandbox` in a pool of its own, so a
slow template never delays the tokenization of other requests.
"""

from __future__ import annotations

import asyncio
import functools
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from specdec.server.errors import BadRequestError
from specdec.server.options import ServerOptions
from specdec.server.template_sandbox import render

# apply_chat_template's own parameters: as chat_template_kwargs they would change what
# it does (tokenize, return tensors...) rather than feed the template.
RESERVED_TEMPLATE_KWARGS = frozenset({
    "conversation", "tools", "documents", "add_generation_prompt", "continue_final_message",
    "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs",
})
NON_SHRINKING_NORMALIZERS = frozenset({"Prepend"})


def max_prompt_chars(tokenizer, max_model_len: int) -> int | None:
    """The most characters a prompt that fits the context can have, or None if unknown.

    The bound: for a BPE model whose normalizer never deletes or merges characters, the
    tokens of a text spell it out, each token string at least as long as the text it
    covers (a byte-level token string has one character per UTF-8 byte, and a text has
    no more characters than bytes). So one token covers at most ``L`` characters, ``L``
    the longest token string in the vocabulary, added tokens included (81 for SmolLM2).
    A prompt has at most ``max_model_len - 1`` tokens, so one with more than
    ``(max_model_len - 1) * L`` characters can never fit. WordPiece (a whole unknown
    word is one token), fused unknown tokens and normalizers that delete or merge
    characters (NFKC, strip, accents) break the bound: then None, and only the request
    body limit bounds what is tokenized.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    spec = json.loads(backend.to_str())
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or (model.get("fuse_unk") and model.get("unk_token")):
        return None
    if not _non_shrinking(spec.get("normalizer")):
        return None
    longest = max(len(token) for token in backend.get_vocab(with_added_tokens=True))
    return max(1, max_model_len - 1) * longest


def _non_shrinking(normalizer: dict | None) -> bool:
    if normalizer is None:
        return True
    kind = normalizer.get("type")
    if kind == "Sequence":
        return all(_non_shrinking(n) for n in normalizer.get("normalizers", []))
    if kind == "Replace":  # " " -> "▁" in sentencepiece-style tokenizers
        pattern = normalizer.get("pattern", {}).get("String")
        return pattern is not None and len(normalizer.get("content", "")) >= len(pattern)
    return kind in NON_SHRINKING_NORMALIZERS


class PromptPreparer:
    """Renders and tokenizes prompts in worker threads; one per server."""

    def __init__(self, tokenizer, max_model_len: int, options: ServerOptions):
        self.tokenizer = tokenizer
        self.options = options
        self.max_chars = max_prompt_chars(tokenizer, max_model_len)
        self.max_model_len = max_model_len
        self._pool = ThreadPoolExecutor(options.prompt_workers, "specdec-prompt")
        self._template_pool = ThreadPoolExecutor(1, "specdec-request-template")

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._template_pool.shutdown(wait=False, cancel_futures=True)

    async def tokenize(self, text: str, param: str = "prompt") -> list[int]:
        """Token ids of ``text`` (special tokens in it are recognised, none are added)."""
        check_text(text, param)
        if self.max_chars is not None and len(text) > self.max_chars:
            raise BadRequestError(
                f"{param} has {len(text)} characters, more than any prompt that fits the "
                f"model's context of {self.max_model_len} tokens can have", param=param)
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:  # read-only Rust call: safe beside the engine thread
            def encode() -> list[int]:
                return backend.encode(text, add_special_tokens=False).ids
        else:
            def encode() -> list[int]:
                return self.tokenizer.encode(text, add_special_tokens=False)
        return await asyncio.get_running_loop().run_in_executor(self._pool, encode)

    async def render_chat(self, messages: list[dict[str, Any]], add_generation_prompt: bool,
                          template_kwargs: dict[str, Any], request_template: str | None) -> str:
        """The chat prompt text: the model's template, or the client's if it is trusted."""
        reserved = sorted(RESERVED_TEMPLATE_KWARGS & set(template_kwargs))
        if reserved:
            raise BadRequestError(f"chat_template_kwargs may not set {reserved}",
                                  param="chat_template_kwargs")
        timeout = self.options.template_timeout_s
        if request_template is not None:
            if not self.options.trust_request_chat_template:
                raise BadRequestError(
                    "chat_template: this server does not accept chat templates from "
                    "requests (start it with --trust-request-chat-template)",
                    param="chat_template")
            variables = {**self._special_tokens(), **template_kwargs, "messages": messages,
                         "add_generation_prompt": add_generation_prompt}
            pool = self._template_pool
            job = functools.partial(render, request_template, timeout, **variables)
        else:
            if not self.tokenizer.chat_template:
                raise BadRequestError("this model has no chat template; use /v1/completions")
            pool = self._pool
            job = functools.partial(self.tokenizer.apply_chat_template, messages,
                                    tokenize=False, add_generation_prompt=add_generation_prompt,
                                    **template_kwargs)
        future = asyncio.get_running_loop().run_in_executor(pool, job)
        try:
            return await asyncio.wait_for(future, timeout + 1.0)
        except TimeoutError:
            raise BadRequestError(f"the chat template took longer than {timeout} s",
                                  param="chat_template") from None
        except BadRequestError:
            raise
        except Exception as exc:  # noqa: BLE001 - template errors (role order...) are user errors
            raise BadRequestError(f"cannot apply the chat template: {_short(exc)}",
                                  param="messages") from None

    def _special_tokens(self) -> dict[str, Any]:
        names = ("bos_token", "eos_token", "unk_token", "pad_token")
        return {n: getattr(self.tokenizer, n, None) for n in names}


def check_text(text: str, param: str) -> None:
    """Refuse a string that is not valid Unicode (a lone surrogate such as "\\ud800")."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequestError(f"{param} contains a lone surrogate at character {exc.start}; "
                              "send valid UTF-8 text", param=param) from None


def _short(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}" if isinstance(exc, RecursionError) else str(exc)
    return text if len(text) <= limit else text[:limit] + "..."
