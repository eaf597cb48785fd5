"""Constraints compile in the compile pool: a large grammar never stalls the engine thread."""

from __future__ import annotations

import time
import uuid

import pytest

from specdec import LLM, SamplingParams
from specdec.structured.compile import isolation_ready


def _chain_grammar(num_rules: int, tail: str = "") -> str:
    tag = uuid.uuid4().hex[:8]  # new text: no cache has it
    rules = "".join(f'r{i}: "k{i}{tag}" r{i + 1} | "x{i}"\n' for i in range(num_rules))
    return f'start: r0\n{rules}r{num_rules}: "end"{tail}\n'


@pytest.fixture()
def llm(tiny_model_dir, tmp_path, monkeypatch):
    llm = LLM(model=str(tiny_model_dir), dtype="float32", load_entry_points=False)
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))  # compiled entries go here
    # The compile forkserver preloads for ~2 s after start; these tests time compiles.
    assert isolation_ready(60.0)
    return llm


def _run_until_finished(engine, request, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while not request.is_finished and time.monotonic() < deadline:
        if not engine.step():
            time.sleep(0.005)
    assert request.is_finished


def test_large_grammar_compiles_while_other_requests_run(llm):
    engine = llm.engine
    start = time.perf_counter()
    big = engine.add_request("Hello", SamplingParams(max_tokens=3, temperature=0.0,
                                                     extra={"grammar": _chain_grammar(600)}))
    admit_s = time.perf_counter() - start
    assert big.blocked_reason  # compiling in the pool; the engine thread is free
    plain = engine.add_request("Hi", SamplingParams(max_tokens=4, ignore_eos=True))
    _run_until_finished(engine, plain)
    assert plain.finish_reason == "length" and big.blocked_reason  # done before the compile
    assert admit_s < 1.0
    _run_until_finished(engine, big)
    assert big.error is None and big.finish_reason in ("stop", "length")
    first = engine.tokenizer.decode(big.output_token_ids)
    assert first.startswith(("k0", "x0")), first


def test_bad_grammar_is_still_rejected_before_queueing(llm):
    # Rejected at add_request when the compile says so within validate_wait_s; give it
    # time, so a loaded machine tests the rejection, not its speed (the pooled case is
    # the next test).
    llm.engine.pm.get_plugin("structured").validate_wait_s = 30.0
    with pytest.raises(ValueError, match="invalid Lark grammar"):
        llm.engine.add_request("Hi", SamplingParams(extra={"grammar": "start: nope"}))
    assert llm.stats()["num_waiting"] == 0


def test_bad_grammar_found_in_the_pool_fails_its_request(llm):
    llm.engine.pm.get_plugin("structured").validate_wait_s = 0.0  # never wait: always pooled
    bad = llm.engine.add_request("Hi", SamplingParams(
        max_tokens=3, extra={"grammar": _chain_grammar(20, " undefined_rule")}))  # queued
    _run_until_finished(llm.engine, bad)
    assert bad.finish_reason == "error" and "invalid Lark grammar" in bad.error
    assert llm.stats()["structured_compile_errors"] == 1
