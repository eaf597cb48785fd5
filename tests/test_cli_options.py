"""Every CLI default is the default of the config field it sets, and the flags round-trip."""

from __future__ import annotations

import dataclasses

import pytest

from specdec.bench import BENCHMARKS
from specdec.cli import build_parser
from specdec.cli.options import (
    CLI_DTYPES,
    DRAFT_QUANTIZATIONS,
    GENERATE_SAMPLING_DEFAULTS,
    engine_kwargs,
    field_default,
    sampling_params,
    speculative_options,
)
from specdec.config import DTYPES, EngineConfig
from specdec.sampling_params import SamplingParams
from specdec.server.serve import engine_config
from specdec.speculative.config import METHODS, SpeculativeConfig

COMMANDS = [["generate", "x"], ["serve"], *(["bench", name] for name in BENCHMARKS)]
ENGINE_FLAGS = {  # argparse dest -> EngineConfig field
    "model": "model", "dtype": "dtype", "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "enable_prefix_caching": "enable_prefix_caching", "fused_kernels": "fused_kernels",
    "batch_invariant": "batch_invariant",
    "speculative_method": "speculative",
}
SPECULATIVE_FLAGS = {  # argparse dest -> SpeculativeConfig field
    "num_speculative_tokens": "num_speculative_tokens",
    "prompt_lookup_min": "prompt_lookup_min", "prompt_lookup_max": "prompt_lookup_max",
    "draft_model": "model", "draft_quantization": "draft_quantization",
}
SAMPLING_FLAGS = ["max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop"]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_engine_flag_defaults_are_the_config_defaults(argv):
    args = build_parser().parse_args(argv)
    engine, spec = EngineConfig(), SpeculativeConfig()
    for dest, name in ENGINE_FLAGS.items():
        assert getattr(args, dest) == getattr(engine, name), dest
    for dest, name in SPECULATIVE_FLAGS.items():
        assert getattr(args, dest) == getattr(spec, name), dest
    assert EngineConfig.from_kwargs(**engine_kwargs(args)) == engine


def test_generate_sampling_defaults_are_samplingparams_but_longer_and_greedy():
    args = build_parser().parse_args(["generate", "x"])
    assert GENERATE_SAMPLING_DEFAULTS == {"max_tokens": 128, "temperature": 0.0}
    for dest in SAMPLING_FLAGS:
        expected = GENERATE_SAMPLING_DEFAULTS.get(dest, field_default(SamplingParams, dest))
        assert getattr(args, dest) == expected, dest
    assert sampling_params(args) == SamplingParams(max_tokens=128, temperature=0.0)


def test_serve_builds_the_default_engine_config():
    args = build_parser().parse_args(["serve"])
    assert args.plugin == [] and args.disable_plugin == []
    assert engine_config(args) == EngineConfig()
    args = build_parser().parse_args(["serve", "--plugin", "a", "--disable-plugin", "b"])
    config = engine_config(args)
    assert config.plugins == ["a"] and config.disable_plugins == ["b"]


def test_flags_reach_the_configs():
    args = build_parser().parse_args(
        ["generate", "x", "--dtype", "float32", "--max-num-seqs", "3",
         "--max-num-batched-tokens", "99", "--no-prefix-caching", "--no-fused-kernels",
         "--top-k", "5", "--stop", "a", "--stop", "b", "--seed", "7"])
    config = EngineConfig.from_kwargs(**engine_kwargs(args))
    assert (config.dtype, config.max_num_seqs, config.max_num_batched_tokens) == \
        ("float32", 3, 99)
    assert not config.enable_prefix_caching and not config.fused_kernels
    params = sampling_params(args)
    assert (params.top_k, params.stop, params.seed) == (5, ["a", "b"], 7)


@pytest.mark.parametrize("method", METHODS)
def test_speculative_flags_build_the_default_speculative_config(method):
    args = build_parser().parse_args(["generate", "x", "--speculative-method", method])
    assert SpeculativeConfig.from_dict(speculative_options(args)) == \
        SpeculativeConfig(method=method)


def test_choices_are_values_the_configs_accept():
    assert set(CLI_DTYPES) <= set(DTYPES)
    for quantization in DRAFT_QUANTIZATIONS:
        SpeculativeConfig(method="draft", draft_quantization=quantization)


def test_field_default_reads_defaults_and_factories():
    assert field_default(EngineConfig, "max_num_seqs") == 64
    plugins = field_default(EngineConfig, "plugins")
    assert plugins == [] and plugins is not field_default(EngineConfig, "plugins")
    with pytest.raises(AttributeError):
        field_default(EngineConfig, "no_such_field")

    @dataclasses.dataclass
    class Required:
        x: int

    with pytest.raises(TypeError):
        field_default(Required, "x")


def test_batch_invariant_flag():
    def config(*flags: str) -> EngineConfig:
        return EngineConfig.from_kwargs(**engine_kwargs(
            build_parser().parse_args(["generate", "x", *flags])))

    assert config("--batch-invariant").batch_invariant
    assert not config().batch_invariant and not config("--no-batch-invariant").batch_invariant
