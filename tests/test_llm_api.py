"""The public API: LLM.generate / chat, RequestOutput, metrics, stats, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specdec import LLM, RequestOutput, SamplingParams


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(model=str(tiny_model_dir), dtype="float32")


def test_single_prompt_returns_list_of_one(llm):
    outs = llm.generate("Hello", SamplingParams(max_tokens=5, ignore_eos=True), use_tqdm=False)
    assert len(outs) == 1 and isinstance(outs[0], RequestOutput)
    out = outs[0]
    assert out.prompt == "Hello" and out.prompt_token_ids == llm.tokenizer.encode("Hello")
    assert len(out.token_ids) == 5 and out.finish_reason == "length" and out.error is None
    assert out.text == llm.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    m = out.metrics
    assert m.ttft > 0 and m.mean_itl > 0 and m.finish_time >= m.first_token_time >= m.arrival_time


def test_token_id_prompts_and_stop_token_ids(llm):
    ref = llm.generate("Hello", SamplingParams(max_tokens=6, temperature=0, ignore_eos=True),
                       use_tqdm=False)[0]
    ids = llm.tokenizer.encode("Hello")
    stop_at = ref.token_ids[2]
    out = llm.generate([ids], SamplingParams(max_tokens=6, temperature=0, ignore_eos=True,
                                             stop_token_ids=[stop_at]), use_tqdm=False)[0]
    first = ref.token_ids.index(stop_at)
    assert out.token_ids == ref.token_ids[: first + 1] and out.finish_reason == "stop"


def test_stats_count_tokens_and_blocks(llm):
    before = llm.stats()
    llm.generate(["a", "b c"], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
    after = llm.stats()
    assert after["generation_tokens"] - before["generation_tokens"] == 8
    assert after["steps"] > before["steps"]
    for key in ("preemptions", "kv_blocks_used", "kv_blocks_free", "prompt_tokens"):
        assert key in after
    assert after["kv_blocks_used"] == 0


def test_cli_generate_json(tiny_model_dir):
    cmd = [sys.executable, "-m", "specdec.cli", "generate", "Hello", "--model", str(tiny_model_dir),
           "--max-tokens", "4", "--json", "--dtype", "float32"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    record = json.loads(res.stdout.strip().splitlines()[-1])
    assert record["num_tokens"] <= 4 and record["finish_reason"] in ("stop", "length")


def test_cli_bad_input_exit_code(tiny_model_dir):
    cmd = [sys.executable, "-m", "specdec.cli", "generate", "Hi", "--model", str(tiny_model_dir),
           "--max-tokens", "0"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "max_tokens must be" in res.stderr


@pytest.mark.slow
def test_chat_on_real_model_extracts_json():
    llm = LLM()
    out = llm.chat(
        [{"role": "user", "content": "Extract the name and age as JSON: Ann is 31."}],
        SamplingParams(max_tokens=128, temperature=0.0),
    )[0]
    assert out.finish_reason == "stop"
    assert '"Ann"' in out.text and "31" in out.text
    many = llm.chat([[{"role": "user", "content": "Hi"}], [{"role": "user", "content": "Bye"}]],
                    SamplingParams(max_tokens=8), use_tqdm=False)
    assert len(many) == 2 and all(o.token_ids for o in many)


def test_cli_generate_with_choice_constraint(tiny_model_dir):
    cmd = [sys.executable, "-m", "specdec.cli", "generate", "Sentiment:", "--model",
           str(tiny_model_dir), "--choice", "positive", "negative", "--max-tokens", "8"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() in ("positive", "negative")


def test_cli_invalid_regex_is_a_clear_error(tiny_model_dir):
    cmd = [sys.executable, "-m", "specdec.cli", "generate", "x", "--model", str(tiny_model_dir),
           "--regex", "(unclosed"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "regex" in res.stderr.lower()
