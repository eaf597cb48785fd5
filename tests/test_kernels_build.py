"""The fused kernels must build wherever a compiler is present, or their tests
(which skip when the build fails) would silently stop running."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import pytest

from specdec import isa, kernels


def test_kernels_build_where_a_compiler_exists():
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not (shutil.which("c++") or shutil.which("g++")) or not headers.exists():
        pytest.skip("no C++ compiler or Python headers here")
    if not kernels.enabled_by_env():
        pytest.skip("fused kernels switched off by SPECDEC_KERNELS")
    if isa.level() == "eager":
        assert kernels.load() is None  # the eager level runs plain PyTorch
        return
    assert kernels.load() is not None, "the fused CPU kernels failed to build"
