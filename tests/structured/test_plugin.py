"""The plugin in the engine: real SmolLM2 output always satisfies the constraint."""

from __future__ import annotations

import json
import re
import time
from types import SimpleNamespace

import pytest
import torch

from specdec.core.request import Request
from specdec.sample.logits_rows import LogitsRow
from specdec.sampling_params import SamplingParams
from specdec.structured.plugin import PLUGIN_NAME, StructuredOutputPlugin
from specdec.structured.vocabulary import token_vocabulary

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "city": {"type": "string", "maxLength": 20}}, "required": ["name", "age", "city"]}
PHONE = r"\(\d{3}\) \d{3}-\d{4}"
CHOICES = ["positive", "negative", "neutral"]
PROMPT = [{"role": "user", "content": "Ann is 31 and lives in Oslo. Describe her as JSON."}]


class _Context:
    def __init__(self, tokenizer):
        self.tokenizer, self.vocab_size, self.eos_token_ids = tokenizer, 49152, frozenset([2])
        self.config = SimpleNamespace(speculative=None)


def _plugin_with_request(tokenizer, **options) -> tuple[StructuredOutputPlugin, Request]:
    plugin = StructuredOutputPlugin()
    plugin.specdec_engine_started(_Context(tokenizer))
    request = Request("r", None, [1, 2, 3], SamplingParams(extra=options))
    plugin.specdec_request_added(request)
    deadline = time.monotonic() + 30
    while request.blocked_reason and time.monotonic() < deadline:
        time.sleep(0.01)
    return plugin, request


def test_speculative_rows_are_masked_as_if_drafts_were_accepted(tokenizer):
    plugin, request = _plugin_with_request(tokenizer, grammar="json.lark")
    drafts = tokenizer.encode('{"a', add_special_tokens=False)
    rows = [LogitsRow(request, k, drafts[:k], drafts[k] if k < len(drafts) else None)
            for k in range(len(drafts) + 1)]
    logits = torch.zeros(len(rows), 49152)
    plugin.specdec_logits(logits, rows)
    for k, row in enumerate(rows):
        matcher = request.plugin_data[PLUGIN_NAME].matcher.copy()
        matcher.accept_tokens(row.draft_tokens_before)
        assert torch.isfinite(logits[k]).nonzero().flatten().tolist() == \
            matcher.allowed_token_ids()
    assert request.plugin_data[PLUGIN_NAME].matcher.num_accepted_tokens == 0  # not advanced


def test_drafts_are_cut_at_the_first_rejected_token(tokenizer):
    plugin, request = _plugin_with_request(tokenizer, choice=CHOICES)
    good = tokenizer.encode("positive", add_special_tokens=False)
    request.draft_token_ids = good[:1] + tokenizer.encode("xyz", add_special_tokens=False)
    plugin.specdec_schedule([request])
    assert request.draft_token_ids == good[:1]


def test_postprocess_stops_when_complete_and_fails_closed(tokenizer):
    plugin, request = _plugin_with_request(tokenizer, choice=CHOICES)
    assert plugin.specdec_postprocess(request, tokenizer.encode("neutral",
                                                                add_special_tokens=False)) == "stop"
    plugin2, request2 = _plugin_with_request(tokenizer, choice=CHOICES)
    with pytest.raises(ValueError, match="not allowed"):
        plugin2.specdec_postprocess(request2, tokenizer.encode("xyz", add_special_tokens=False))


def test_compile_timeout_fails_the_request(tokenizer):
    plugin = StructuredOutputPlugin(compile_timeout_s=0.0)
    plugin.specdec_engine_started(_Context(tokenizer))
    request = Request("r", None, [1], SamplingParams(extra={"regex": r"[a-z]{3}x[0-9]{2}q"}))
    plugin.specdec_request_added(request)
    deadline = time.monotonic() + 30
    while request.blocked_reason and time.monotonic() < deadline:
        time.sleep(0.01)
    state = request.plugin_data[PLUGIN_NAME]
    if state.matcher is None:  # lost the race against the timer, as intended
        assert "took longer than" in state.error
        with pytest.raises(ValueError, match="took longer"):
            plugin.specdec_logits(torch.zeros(1, 49152), [LogitsRow(request, 0, [], None)])


@pytest.fixture(scope="module")
def llm():
    from specdec import LLM

    llm = LLM(max_num_seqs=16)
    # One constrained request first: the compile forkserver's start and the engine's
    # start-up walks are behind it, so the validation wait below measures compiles only.
    llm.generate("hi", SamplingParams(max_tokens=1), regex="a")
    return llm


@pytest.mark.slow
def test_real_model_outputs_are_valid_greedy(llm):
    params = SamplingParams(max_tokens=48, temperature=0)
    out = llm.chat(PROMPT, params, grammar="json.lark")[0]
    assert out.finish_reason in ("stop", "length")
    if out.finish_reason == "stop":
        json.loads(out.text)
    out = llm.chat(PROMPT, SamplingParams(max_tokens=64, temperature=0), json_schema=SCHEMA)[0]
    doc = json.loads(out.text)
    assert set(doc) == {"name", "age", "city"} and 0 <= doc["age"] <= 120
    out = llm.chat([{"role": "user", "content": "Give a US phone number."}], params, regex=PHONE)[0]
    assert re.fullmatch(PHONE, out.text) and out.finish_reason == "stop"
    out = llm.chat([{"role": "user", "content": "I love it! Sentiment?"}], params,
                   choice=CHOICES)[0]
    assert out.text in CHOICES and out.finish_reason == "stop"


@pytest.mark.slow
def test_real_model_sampling_many_seeds(llm, tokenizer, compile_for):
    """Temperature 1 over many seeds: every output is a valid (prefix of a) document."""
    seeds = range(8)
    params = [SamplingParams(max_tokens=32, temperature=1.0, seed=s) for s in seeds]
    prompts = [PROMPT] * len(params)
    outs = llm.chat(prompts, params, json_schema=SCHEMA, use_tqdm=False)
    json_outs = llm.chat(prompts, params, grammar="json.lark", use_tqdm=False)
    schema_regex = compile_for(json_schema=SCHEMA)
    json_grammar = compile_for(grammar="json.lark")
    for out, compiled in [(o, schema_regex) for o in outs] + [(o, json_grammar) for o in json_outs]:
        assert out.finish_reason in ("stop", "length"), out.error
        matcher = compiled.matcher()
        assert matcher.accept_tokens(out.token_ids) == len(out.token_ids)  # valid prefix
        if out.finish_reason == "stop":
            json.loads(out.text)
    for out in outs:
        if out.finish_reason == "stop":
            assert set(json.loads(out.text)) == {"name", "age", "city"}


@pytest.mark.slow
def test_bad_constraints_are_rejected_before_generation(llm, monkeypatch):
    # Rejected at add_request when the compile says so within validate_wait_s; give it
    # time, so a loaded machine tests the rejection, not its speed.
    monkeypatch.setattr(llm.engine.pm.get_plugin("structured"), "validate_wait_s", 30.0)
    params = SamplingParams(max_tokens=4)
    for options, message in [({"grammar": "start: nope"}, "invalid Lark grammar"),
                             ({"regex": "(x"}, "invalid regex"),
                             ({"json_schema": {"type": "array", "uniqueItems": True}},
                              "uniqueItems")]:
        with pytest.raises(ValueError, match=message):
            llm.generate("hi", params, **options)
    assert llm.stats()["num_running"] == 0 and llm.stats()["num_waiting"] == 0


@pytest.mark.slow
def test_length_limit_gives_a_valid_prefix(llm, compile_for):
    out = llm.chat(PROMPT, SamplingParams(max_tokens=5, temperature=0), grammar="json.lark")[0]
    assert out.finish_reason == "length"
    matcher = compile_for(grammar="json.lark").matcher()
    assert matcher.accept_tokens(out.token_ids) == 5


def test_vocabulary_is_shared_per_tokenizer(tokenizer):
    assert token_vocabulary(tokenizer, 49152, frozenset([2])) is \
        token_vocabulary(tokenizer, 49152, frozenset([2]))
