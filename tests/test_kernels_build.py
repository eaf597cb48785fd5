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


@pytest.mark.parametrize(("vendor", "env", "expected"), [
    ("AuthenticAMD", None, True),  # measured there: on by default
    ("GenuineIntel", None, False),  # not measured: off
    (None, None, False),
    ("GenuineIntel", "1", True),
    ("AuthenticAMD", "off", False),
    ("AuthenticAMD", "bogus", True),  # not a setting: the default
])
def test_nontemporal_weights_default_by_vendor_and_forced_by_env(monkeypatch, vendor, env,
                                                                 expected):
    monkeypatch.setattr(isa, "cpuinfo_field",
                        lambda *names: vendor if names == ("vendor_id",) else None)
    if env is None:
        monkeypatch.delenv(kernels.NONTEMPORAL_ENV, raising=False)
    else:
        monkeypatch.setenv(kernels.NONTEMPORAL_ENV, env)
    assert kernels.nontemporal_weights() is expected


def test_the_loaded_kernels_follow_the_policy():
    module = kernels.load()
    if module is None:
        pytest.skip("fused CPU kernels unavailable")
    assert module.nontemporal_weights() is kernels.nontemporal_weights()
