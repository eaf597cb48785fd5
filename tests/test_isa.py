"""Instruction-set levels: what each CPU runs, what SPECDEC_ISA forces, what each
level builds and packs. The kernel and engine tests themselves run at every level
the CPU has in ``test_isa_levels.py``."""

from __future__ import annotations

import pytest
import torch

from specdec import isa, kernels

ZEN3 = {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}
ZEN5 = ZEN3 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_vnni"}
SAPPHIRE_RAPIDS = ZEN5 | {"amx_tile", "amx_bf16", "amx_int8"}
SKYLAKE_X = ZEN3 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}


@pytest.mark.parametrize(("flags", "level"), [
    (set(), "eager"), ({"avx2"}, "eager"), (ZEN3, "avx2"), (ZEN5, "avx512"),
    (SKYLAKE_X, "avx512"), (SAPPHIRE_RAPIDS, "amx"),
    (ZEN3 | {"amx_tile", "amx_bf16", "avx512_bf16"}, "avx2"),  # AMX without AVX-512 BW/VL/DQ
])
def test_highest_level_from_cpu_flags(flags, level):
    assert isa.highest_level(flags) == level


def test_non_x86_has_eager_and_native():
    assert isa.highest_level(set(), x86=False) == "native"
    assert isa.choose_level("avx2", set(), x86=False) == "native"
    assert isa.choose_level("eager", set(), x86=False) == "eager"


def test_forced_level_is_clamped_to_the_cpu_with_one_line():
    said = []
    assert isa.choose_level(None, ZEN5) == "avx512"
    assert isa.choose_level("auto", ZEN5) == "avx512"
    assert isa.choose_level("AVX2", ZEN5, warn=said.append) == "avx2"
    assert isa.choose_level("eager", SAPPHIRE_RAPIDS) == "eager"
    assert not said
    assert isa.choose_level("amx", ZEN3, warn=said.append) == "avx2"
    assert isa.choose_level("sse", ZEN5, warn=said.append) == "avx512"
    assert len(said) == 2 and "cannot run" in said[0] and "not one of" in said[1]


def test_compiler_flags_never_native_and_never_above_the_level():
    avx2 = isa.compiler_flags("avx2", SAPPHIRE_RAPIDS)
    assert avx2 == ["-mavx2", "-mfma", "-mf16c"]
    avx512 = isa.compiler_flags("avx512", SAPPHIRE_RAPIDS)
    assert "-mavx512bf16" in avx512 and not any("amx" in f for f in avx512)
    assert "-mavx512bf16" not in isa.compiler_flags("avx512", SKYLAKE_X)
    assert "-mamx-tile" in isa.compiler_flags("amx", SAPPHIRE_RAPIDS)
    for level in ("avx2", "avx512", "amx"):
        assert "-march=native" not in isa.compiler_flags(level, SAPPHIRE_RAPIDS)
    with pytest.raises(ValueError):
        isa.compiler_flags("eager", ZEN3)


def test_each_level_has_its_own_kernel_build():
    tags = {kernels.build_tag(level) for level in ("avx2", "avx512", "amx")}
    assert len(tags) == 3 and all(t.startswith(("avx2-", "avx512-", "amx-")) for t in tags)
    assert "-mavx512f" not in kernels.build_flags("avx2")


def test_torch_caps_of_a_forced_level():
    assert isa.torch_caps("avx2")["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert "amx" not in isa.torch_caps("avx512")["ONEDNN_MAX_CPU_ISA"].lower()
    assert isa.torch_caps("amx") == {}


def test_this_process_level_is_runnable_and_described():
    assert isa.level() in isa.runnable_levels()
    assert f"isa={isa.level()}" in isa.describe()


def test_auto_dtype_is_float32_below_avx512(monkeypatch):
    from specdec.model import builder

    monkeypatch.setattr(isa, "level", lambda: "avx2")
    builder.fastest_matmul_dtype.cache_clear()
    try:
        assert builder.fastest_matmul_dtype() == torch.float32
    finally:
        builder.fastest_matmul_dtype.cache_clear()


def test_auto_dtype_cache_is_keyed_by_level_and_flags(monkeypatch, tmp_path):
    """Two CPUs that both call themselves "AMD EPYC" must not share a measurement."""
    import json

    from specdec.model import builder

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(isa, "level", lambda: "avx512")
    monkeypatch.setattr(builder, "_measure_fastest_dtype", lambda: torch.bfloat16)
    builder.fastest_matmul_dtype.cache_clear()
    try:
        builder.fastest_matmul_dtype()
        (key,) = json.loads((tmp_path / "dtype-auto.json").read_text())
        assert key.startswith("isa avx512|flags ") and "EPYC" not in key
    finally:
        builder.fastest_matmul_dtype.cache_clear()


def test_onednn_packing_only_from_avx512(monkeypatch):
    from specdec.model import packed_linear, weight_info

    monkeypatch.setattr(isa, "level", lambda: "avx2")
    monkeypatch.setattr(isa, "cpu_flags", lambda: frozenset(ZEN3))
    packed_linear.available.cache_clear()
    try:
        assert packed_linear.available() is False
        model = torch.nn.Sequential(torch.nn.Linear(32, 32, dtype=torch.bfloat16))
        assert packed_linear.pack_linears(model, 4) is False
        assert weight_info.weight_layout(model) == "plain"
    finally:
        packed_linear.available.cache_clear()


def test_stats_say_level_dtype_and_layout(tiny_model_dir):
    from specdec import LLM

    stats = LLM(model=str(tiny_model_dir), dtype="float32").stats()
    assert stats["isa"] == isa.level()
    assert stats["dtype"] == "float32"
    assert stats["weight_layout"] == "plain"  # float32 weights are never pre-packed
    assert stats["fused_kernels"] == (isa.level() != "eager")


def test_engine_summary_names_the_path():
    line = isa.engine_summary({"dtype": "bfloat16", "weight_layout": "onednn-packed",
                               "fused_kernels": True})
    assert line.startswith(f"isa={isa.level()}")
    assert "dtype=bfloat16" in line and "weights=onednn-packed" in line
    assert "fused kernels" in line and "non-temporal" not in line
    hinted = isa.engine_summary({"weight_layout": "gguf-Q4_1", "fused_kernels": True,
                                 "nontemporal_weights": True})
    assert "non-temporal weight loads" in hinted


def test_extensions_can_be_hidden_to_run_a_cpu_without_them():
    assert isa.kept_extensions(ZEN5, None) == ZEN5
    assert isa.kept_extensions(ZEN5, "all") == ZEN5
    assert isa.kept_extensions(ZEN5, "none") == SKYLAKE_X
    assert isa.kept_extensions(ZEN5, "avx512_vnni") == SKYLAKE_X | {"avx512_vnni"}
    assert "-mavx512vnni" not in isa.compiler_flags("avx512", isa.kept_extensions(ZEN5, "none"))
    # an AMX CPU without avx512_bf16 is an avx512 one
    assert isa.highest_level(isa.kept_extensions(SAPPHIRE_RAPIDS, "avx512_vnni")) == "avx512"


def test_torch_caps_follow_the_kept_extensions():
    assert isa.torch_caps("avx512", SKYLAKE_X)["ONEDNN_MAX_CPU_ISA"] == "AVX512_CORE"
    vnni = SKYLAKE_X | {"avx512_vnni"}
    assert isa.torch_caps("avx512", vnni)["ONEDNN_MAX_CPU_ISA"] == "AVX512_CORE_VNNI"
    assert isa.torch_caps("avx512", ZEN5)["ONEDNN_MAX_CPU_ISA"] == "AVX512_CORE_BF16"
