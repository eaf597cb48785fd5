"""``specdec bench prefix`` end to end on a tiny model (a smoke test of the figures)."""

from __future__ import annotations

from specdec.bench.prefix import shareable_tokens
from specdec.cli import build_parser


def test_shareable_tokens_counts_full_blocks_shared_with_an_earlier_prompt():
    prompts = [[1] * 40, [1] * 40, [1] * 20 + [2] * 20, [3] * 5]
    # cold cache: 0; a twin: 39 tokens -> 2 blocks; 20 shared -> 1 block; nothing shared: 0
    assert shareable_tokens(prompts, 16) == 0 + 32 + 16 + 0


def test_bench_prefix_runs_and_hits_every_shareable_token(tiny_model_dir, capsys):
    from specdec.bench import prefix

    args = build_parser().parse_args(
        ["bench", "prefix", "--model", str(tiny_model_dir), "--dtype", "float32",
         "--num-requests", "6", "--max-tokens", "3", "--min-system-tokens", "200"]
    )
    result = prefix.main(args)
    assert result["system_prompt_tokens"] >= 200
    assert result["hit_rate_of_shareable"] == 1.0
    assert result["same_greedy_outputs"] == 6
    assert result["on"]["forward_tokens"] < result["off"]["forward_tokens"]
    assert "hit rate" in capsys.readouterr().out
