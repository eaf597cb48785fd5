"""``python -m specdec.bench.step_phases``: each stage of a decode step timed."""

from __future__ import annotations

from specdec import LLM
from specdec.bench import step_phases


def test_stages_of_a_decode_step_are_timed(tiny_model_dir):
    llm = LLM(model=str(tiny_model_dir), dtype="float32", load_entry_points=False)
    tokens_before = llm.stats()["generation_tokens"]
    per_step, steps = step_phases.measure(llm, max_tokens=6, rounds=2)
    assert steps == 12  # one token a step, two rounds of six
    assert llm.stats()["generation_tokens"] - tokens_before == 18  # with the untimed round
    for label in ("step", "execute", "  forward", "  LM head", "sample", "schedule"):
        assert per_step[label] > 0, label
    assert per_step["step"] > per_step["execute"] > per_step["  forward"]
    if llm.engine.runner.kernels is not None:  # one decoder_stack call a decode step
        assert 0 < per_step[step_phases.LAYERS] < per_step["  forward"]


def test_requests_decoding_together_share_each_step(tiny_model_dir):
    llm = LLM(model=str(tiny_model_dir), dtype="float32", load_entry_points=False)
    tokens_before = llm.stats()["generation_tokens"]
    per_step, steps = step_phases.measure(llm, max_tokens=6, rounds=1, batch=3)
    assert steps == 6  # the three requests take a token each in every step
    assert llm.stats()["generation_tokens"] - tokens_before == 36  # 3 x 6, two rounds
    assert per_step["step"] > per_step["execute"] > 0
