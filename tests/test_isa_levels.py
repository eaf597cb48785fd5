"""The kernel and engine-parity tests again at every lower instruction-set level this
CPU can run (``SPECDEC_ISA``), each in its own process: the level, its kernel build
and torch's library caps are decided once per process. So a break on an AVX2-only
CPU shows on an AVX-512 or AMX machine before it lands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec import isa

ROOT = Path(__file__).resolve().parents[1]
PER_LEVEL_TESTS = [
    "tests/test_isa.py",
    "tests/test_kernels_build.py",
    "tests/test_kernels.py",
    "tests/test_kernels_layer.py",  # one fused layer(): every projection kind, both paths
    "tests/test_kernels_quant.py",  # GGUF projections: every format on this level's path
    "tests/test_kernels_bf16_invariant.py",  # batch-invariant bf16 (skips below avx512)
    "tests/test_kernels_sample.py",  # the fused draw: its distribution on a grid
    "tests/test_bf16_engine.py",
    "tests/test_gguf_engine.py",  # the bundled model on its GGUF blocks vs dequantized
    "tests/test_batch_invariance.py",  # alone = batched = chunked = cached = speculative
    "tests/test_correctness_hf.py",  # tiny models: greedy identity with HF in float32
]
SLOW = ["--deselect", "tests/test_correctness_hf.py::test_smollm2_matches_hf"]
# Again at avx512 with no optional extension (an AVX-512 CPU without avx512_bf16 and
# VNNI, e.g. Skylake-SP): the kernels' other code paths.
NO_EXTENSION_TESTS = [
    "tests/test_kernels.py",
    "tests/test_kernels_layer.py",
    "tests/test_kernels_quant.py",
    "tests/test_kernels_bf16_invariant.py",
    "tests/test_gguf_engine.py",
]

pytestmark = pytest.mark.skipif(
    bool(os.environ.get(isa.ENV) or os.environ.get(isa.EXTENSIONS_ENV)),
    reason="already a forced-level run")


def lower_levels() -> list[str]:
    return [level for level in isa.runnable_levels() if level != isa.level()]


@pytest.mark.parametrize("level", lower_levels() or [pytest.param(None, marks=pytest.mark.skip(
    reason="this CPU runs only one level"))])
def test_suite_at_level(level):
    env = {**os.environ, isa.ENV: level, **isa.torch_caps(level)}
    _run_tests(env, [*PER_LEVEL_TESTS, *SLOW], f"SPECDEC_ISA={level}")


@pytest.mark.skipif(not (isa.at_least("avx512") and isa.cpu_flags() & isa.OPTIONAL_EXTENSIONS),
                    reason="no AVX-512 extension to hide on this CPU")
def test_kernels_at_avx512_without_extensions():
    flags = isa.kept_extensions(isa.cpu_flags(), "none")
    env = {**os.environ, isa.ENV: "avx512", isa.EXTENSIONS_ENV: "none",
           **isa.torch_caps("avx512", flags)}
    _run_tests(env, NO_EXTENSION_TESTS, "SPECDEC_ISA=avx512 SPECDEC_ISA_EXTENSIONS=none")


def _run_tests(env: dict[str, str], tests: list[str], what: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500,
    )
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    assert proc.returncode == 0, f"tests at {what} failed:\n{tail}"
    assert " passed" in proc.stdout
