"""The peers of ``specdec bench structured``: llguidance and xgrammar, when installed.

Each peer gets the same constraint and the same tokenizer and is timed the way specdec
is (:func:`specdec.bench.structured._mask_and_compile`): a cold compile (no compiler cache),
then the next-token bitmask before every token of the same documents. A peer that is
not installed, or cannot take a constraint, is reported as such; it is never required.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from specdec.bench.workload import percentile

# {"json_schema": ...}, {"regex": ...} or {"grammar": "json.lark"}; json.lark has no peer
# spelling: each peer's own any-JSON grammar stands in for it (the same language).
Constraint = dict[str, Any]


def llguidance_peer(tokenizer, vocab_size: int):
    import llguidance
    import llguidance.hf
    import llguidance.torch

    lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)

    def compile_constraint(constraint: Constraint):
        if "json_schema" in constraint:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                json.dumps(constraint["json_schema"]), defaults={"whitespace_flexible": True})
        elif "regex" in constraint:
            grammar = llguidance.LLMatcher.grammar_from_regex(constraint["regex"])
        else:  # any JSON value
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                "{}", defaults={"whitespace_flexible": True})
        matcher = llguidance.LLMatcher(lltok, grammar)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return grammar

    def new_matcher(grammar):
        return llguidance.LLMatcher(lltok, grammar)

    bitmask = llguidance.torch.allocate_token_bitmask(1, vocab_size)

    def fill(matcher) -> None:
        llguidance.torch.fill_next_token_bitmask(matcher, bitmask, 0)

    def accept(matcher, token: int) -> bool:
        return matcher.consume_token(token) and not matcher.is_error()

    return compile_constraint, new_matcher, fill, accept


def xgrammar_peer(tokenizer, vocab_size: int):
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)

    def compile_constraint(constraint: Constraint):
        compiler = xgr.GrammarCompiler(info, cache_enabled=False)  # cold every time
        if "json_schema" in constraint:
            return compiler.compile_json_schema(json.dumps(constraint["json_schema"]),
                                                any_whitespace=False)
        if "regex" in constraint:
            return compiler.compile_regex(constraint["regex"])
        return compiler.compile_builtin_json_grammar()

    bitmask = xgr.allocate_token_bitmask(1, vocab_size)

    def fill(matcher) -> None:
        matcher.fill_next_token_bitmask(bitmask, 0)

    def accept(matcher, token: int) -> bool:
        return matcher.accept_token(token)

    return compile_constraint, xgr.GrammarMatcher, fill, accept


PEERS: dict[str, Callable] = {"llguidance": llguidance_peer, "xgrammar": xgrammar_peer}


def peer_mask_bench(name: str, tokenizer, vocab_size: int, constraint: Constraint,
                    texts: list[str]) -> dict:
    """Compile p50 of three cold compiles, then mask p50/p99 over ``texts``."""
    try:
        compile_constraint, new_matcher, fill, accept = PEERS[name](tokenizer, vocab_size)
    except ImportError:
        return {"status": "not installed"}
    compile_times = []
    try:
        for _ in range(3):
            start = time.perf_counter()
            compiled = compile_constraint(constraint)
            compile_times.append(time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - a peer's refusal is a result, not a crash
        return {"status": f"refused: {type(exc).__name__}: {str(exc)[:120]}"}
    times: list[float] = []
    for text in texts:
        matcher = new_matcher(compiled)
        for token in tokenizer.encode(text, add_special_tokens=False):
            t0 = time.perf_counter()
            fill(matcher)
            times.append(time.perf_counter() - t0)
            if not accept(matcher, token):
                return {"status": f"rejected a benchmark document: {text[:60]!r}"}
    return {"status": "ok", "compile_cold_s": percentile(compile_times, 50),
            "mask_steps": len(times), "mask_p50_us": percentile(times, 50) * 1e6,
            "mask_p99_us": percentile(times, 99) * 1e6, "mask_max_us": max(times) * 1e6}
