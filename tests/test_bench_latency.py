"""`specdec bench latency` and `bench throughput`: workloads, floors, sampled runs."""

from __future__ import annotations

from specdec.bench.latency import mean_context
from specdec.bench.workload import random_prompt_ids
from specdec.cli import build_parser


def test_random_prompts_have_the_length_avoid_the_vocab_start_and_share_no_prefix():
    prompts = random_prompt_ids(1600, 50, 3, seed=1)
    assert [len(p) for p in prompts] == [50, 50, 50]
    assert all(100 <= t < 1600 for p in prompts for t in p)
    assert len({tuple(p[:2]) for p in prompts}) == 3
    assert prompts == random_prompt_ids(1600, 50, 3, seed=1)


def test_mean_context_counts_the_positions_each_decode_step_reads():
    # 10-token prompt, 3 tokens out: decode steps read 11 and 12 positions;
    # 4-token prompt, 1 token out: no decode step. Two repeats of the pair.
    outputs = [[7, 7, 7], [7], [7, 7, 7], [7]]
    assert mean_context([[1] * 10, [1] * 4], outputs) == 11.5


def test_bench_latency_on_long_random_prompts(tiny_model_dir, capsys):
    from specdec.bench import latency

    args = build_parser().parse_args(
        ["bench", "latency", "--model", str(tiny_model_dir), "--dtype", "float32",
         "--input-len", "40", "--num-prompts", "2", "--max-tokens", "5", "--ignore-eos",
         "--skip-hf", "--skip-llamacpp"]
    )
    result = latency.main(args)
    assert result["input_len"] == 40 and result["num_prompts"] == 2
    # 5 tokens out of 40-token prompts: decode steps read 41 .. 44 positions.
    per_position = result["kv_bytes_per_token"] / 42.5
    assert per_position > 0 and per_position == int(per_position)
    assert result["bytes_with_kv_floor_ms"] > result["bytes_floor_ms"]
    assert "40 random tokens" in capsys.readouterr().out


def test_bench_latency_sampled_with_speculation_and_hf(tiny_model_dir, capsys):
    from specdec.bench import latency

    args = build_parser().parse_args(
        ["bench", "latency", "--model", str(tiny_model_dir), "--dtype", "float32",
         "--num-prompts", "1", "--max-tokens", "6", "--ignore-eos", "--temperature", "0.8",
         "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05",
         "--speculative-method", "ngram", "--skip-llamacpp"]
    )
    result = latency.main(args)
    out = capsys.readouterr().out
    assert "sampled: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05" in out
    assert result["spec_identical"] is None and "greedy outputs identical" not in out
    assert result["hf_itl_ms"] > 0 and result["itl_ms"] > 0
    assert result["build_s"] > 0 and f"built in {result['build_s']:.2f} s" in out


def test_bench_throughput_sampled_against_hf(tiny_model_dir, capsys):
    from specdec.bench import throughput

    args = build_parser().parse_args(
        ["bench", "throughput", "--model", str(tiny_model_dir), "--dtype", "float32",
         "--num-prompts", "3", "--max-tokens", "5", "--ignore-eos", "--hf-batch-size", "3",
         "--temperature", "0.7", "--top-p", "0.9"]
    )
    result = throughput.main(args)
    out = capsys.readouterr().out
    assert "sampled: temperature 0.7, top-p 0.9" in out
    assert result["specdec_tokens"] == 15 and result["hf_tokens"] == 15
    assert result["identical"] is None and "identical outputs" not in out
    assert "solo_identical" not in result  # greedy-only check
