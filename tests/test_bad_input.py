"""Every bad input gets a precise exception naming the problem."""

from __future__ import annotations

import json
import shutil

import pytest

from specdec import LLM, SamplingParams


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(model=str(tiny_model_dir), dtype="float32", num_kv_blocks=8, block_size=16)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"max_tokens": 0}, "max_tokens must be an integer >= 1"),
        ({"temperature": -0.1}, "temperature must be a finite number >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"top_k": -2}, "top_k must be -1"),
        ({"min_p": 2.0}, "min_p must be in"),
        ({"stop": [""]}, "stop must be non-empty"),
        ({"logprobs": 50}, "logprobs must be"),
    ],
)
def test_bad_sampling_params(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_empty_prompt(llm):
    with pytest.raises(ValueError, match="prompt is empty"):
        llm.generate("", use_tqdm=False)
    with pytest.raises(ValueError, match="prompt is empty"):
        llm.generate([[]], use_tqdm=False)


def test_prompt_longer_than_context(llm):
    with pytest.raises(ValueError, match="model's context is 512 tokens"):
        llm.generate([[5] * 600], use_tqdm=False)
    with pytest.raises(ValueError, match="exceeds the model's context"):
        llm.generate([[5] * 100], SamplingParams(max_tokens=500), use_tqdm=False)


def test_prompt_that_can_never_fit_the_pool(llm):
    with pytest.raises(ValueError, match="needs 10 KV blocks but the pool has only 8"):
        llm.generate([[5] * 150], SamplingParams(max_tokens=10), use_tqdm=False)


def test_bad_request_in_a_batch_rejects_the_call_and_leaks_nothing(llm):
    with pytest.raises(ValueError, match="prompt is empty"):
        llm.generate(["fine", ""], use_tqdm=False)
    stats = llm.stats()
    assert stats["num_waiting"] == stats["num_running"] == 0
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
    assert llm.generate("still works", SamplingParams(max_tokens=3), use_tqdm=False)[0].token_ids


def test_out_of_range_token_ids(llm):
    with pytest.raises(ValueError, match="out of range"):
        llm.generate([[10**9]], use_tqdm=False)


def test_unknown_option(llm):
    with pytest.raises(ValueError, match="unknown request option"):
        llm.generate("hi", use_tqdm=False, no_such_option=1)


def test_unknown_model_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        LLM(model=str(tmp_path / "missing"))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="neither a .gguf file nor a model directory"):
        LLM(model=str(tmp_path / "weights.bin"))


def test_unsupported_architecture(tmp_path, tiny_model_dir):
    target = tmp_path / "gpt2ish"
    shutil.copytree(tiny_model_dir, target)
    config = json.loads((target / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (target / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"unsupported architecture \['GPT2LMHeadModel'\]"):
        LLM(model=str(target))


def test_unknown_plugin_name(tiny_model_dir):
    with pytest.raises(ValueError, match="unknown plugin 'no-such-plugin'"):
        LLM(model=str(tiny_model_dir), plugins=["no-such-plugin"])


def test_bad_engine_config(tiny_model_dir):
    with pytest.raises(ValueError, match="dtype must be one of"):
        LLM(model=str(tiny_model_dir), dtype="float8")
    with pytest.raises(ValueError, match="block_size must be a power of two"):
        LLM(model=str(tiny_model_dir), block_size=12)
    with pytest.raises(ValueError, match="sampling params for 2 prompts"):
        LLM(model=str(tiny_model_dir)).generate(["a", "b"], [SamplingParams()], use_tqdm=False)


def test_grammar_paths_only_through_the_offline_api(llm, tmp_path):
    path = tmp_path / "yn.lark"
    path.write_text('start: "yes" | "no"\n')
    out = llm.generate("Answer:", SamplingParams(max_tokens=4), grammar=str(path),
                       use_tqdm=False)[0]
    assert out.text in ("yes", "no")
    with pytest.raises(ValueError, match="neither a file in grammars/") as info:
        llm.engine.add_request("Answer:", SamplingParams(extra={"grammar": str(path)}))
    assert "yes" not in str(info.value)


def test_one_bad_prompt_among_many_is_named_and_nothing_runs(llm):
    prompts = ["fine"] * 200
    prompts[137] = ""
    prompts[150] = "a\ud800"
    with pytest.raises(ValueError, match="2 of 200 prompts") as info:
        llm.generate(prompts, SamplingParams(max_tokens=2), use_tqdm=False)
    message = str(info.value)
    assert "prompt 137: prompt is empty" in message and "prompt 150:" in message
    assert "surrogate" in message
    stats = llm.stats()
    assert stats["num_waiting"] == stats["num_running"] == 0
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": float("nan")}, "temperature must be a finite"),
    ({"temperature": float("inf")}, "temperature must be a finite"),
    ({"seed": 2**64}, r"seed must be an integer in \[0, 2\*\*64\)"),
    ({"seed": -1}, "seed must be"),
    ({"top_p": float("nan")}, "top_p"),
])
def test_non_finite_and_out_of_range_params(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_tiny_temperature_is_greedy(llm):
    assert SamplingParams(temperature=1e-40).greedy
    assert not SamplingParams(temperature=0.01).greedy
    greedy = llm.generate("Once", SamplingParams(max_tokens=8, temperature=0), use_tqdm=False)
    tiny = llm.generate("Once", SamplingParams(max_tokens=8, temperature=1e-30), use_tqdm=False)
    assert tiny[0].token_ids == greedy[0].token_ids
    assert set(tiny[0].token_ids) != {0}


def test_masked_logprobs_are_reported_at_a_finite_floor():
    import math

    import torch

    from specdec.sample.sampler import LOGPROB_FLOOR, finite_logprobs

    lp = finite_logprobs(torch.log_softmax(torch.tensor([[0.0, float("-inf"), 1.0]]), dim=-1))
    assert lp[0, 1] == LOGPROB_FLOOR and all(math.isfinite(x) for x in lp[0].tolist())
