"""Fused CPU kernels (``cpu_kernels.cpp`` with ``vec16.h``, ``row_ops.h``,
``attention_tile.h``, ``attention_amx.h``, ``tile_linear.h``, ``quant_linear.h``
(projections on raw GGUF blocks), ``bf16_linear.h`` (batch-invariant bf16 projections),
``layer_weights.h`` and ``gguf_stack.h`` (a GGUF model's decoder stack in one parallel
region)), compiled on first use.

The extension is built once per (source, torch version, instruction-set level) into
the specdec cache directory, with the level's own instruction-set flags (``isa.py``:
``-mavx2 -mfma`` for avx2, never ``-march=native`` on x86, so ``SPECDEC_ISA=avx2`` on
an AVX-512 machine builds and runs exactly what an AVX2-only CPU would), and reused
afterwards (about 30 s the first time). Where it cannot be built (no compiler) or the
level is ``eager``, ``load()`` returns None and the model runs its eager PyTorch path;
``SPECDEC_KERNELS=0`` forces that too.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import sys
import warnings
from pathlib import Path
from types import ModuleType

import torch

from specdec import isa

SOURCE = Path(__file__).with_name("cpu_kernels.cpp")
# Every header next to the source is part of the build's cache key: a header left out of
# a hand-kept list would let an edit to it run a stale build.
HEADERS = tuple(sorted(p.name for p in SOURCE.parent.glob("*.h")))


def enabled_by_env() -> bool:
    return os.environ.get("SPECDEC_KERNELS", "1").lower() not in ("0", "false", "no", "off")


@functools.cache
def load() -> ModuleType | None:
    """The compiled kernels module, or None where they are off or cannot be built."""
    if not enabled_by_env() or isa.level() == "eager":
        return None
    try:
        module = _build(isa.level())
    except Exception as exc:  # compiler missing, headers missing, unsupported platform
        warnings.warn(
            f"specdec: fused CPU kernels unavailable ({type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}); "
            "running the eager PyTorch path",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    module.set_nontemporal_weights(nontemporal_weights())
    return module


NONTEMPORAL_ENV = "SPECDEC_NONTEMPORAL_WEIGHTS"


def nontemporal_weights() -> bool:
    """Whether the GGUF and batch-invariant bf16 kernels load weights they read once per
    call (decodes, speculative verification) with a non-temporal hint (``nontemporal.h``).

    On by default on AMD CPUs, where it was measured: a decode token 9-11 % faster with
    the two cores on different core complexes, 2-8 % with them on one (Zen 5). Off
    elsewhere until measured there: Intel's handling of the hint differs (it skips L2,
    and on some parts the L3 too). ``SPECDEC_NONTEMPORAL_WEIGHTS=1|0`` forces it."""
    forced = os.environ.get(NONTEMPORAL_ENV, "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    return isa.cpuinfo_field("vendor_id") == "AuthenticAMD"


def build_flags(level: str) -> list[str]:
    """Compiler flags of the kernel build at ``level``."""
    tune = ["-mtune=native"] if level != "native" else []
    return ["-O3", *isa.compiler_flags(level, isa.cpu_flags()), *tune, "-fopenmp",
            "-ffp-contract=off", "-fno-math-errno"]


def build_tag(level: str) -> str:
    """The build cache entry of ``level``: sources, torch, flags (and for a native build
    the CPU's flags, which decide what ``-march=native`` means)."""
    key = hashlib.blake2b(digest_size=8)
    for path in (SOURCE, *(SOURCE.with_name(h) for h in HEADERS)):
        key.update(path.read_bytes())
    native = " ".join(sorted(isa.cpu_flags())) if level == "native" else ""
    key.update(f"{torch.__version__}|{platform.machine()}|{build_flags(level)}|{native}".encode())
    return f"{level}-{key.hexdigest()}"


def _build(level: str) -> ModuleType:
    from torch.utils import cpp_extension

    from specdec.paths import kernels_dir

    tag = build_tag(level)
    build_dir = kernels_dir() / tag
    build_dir.mkdir(parents=True, exist_ok=True)
    name = f"specdec_cpu_kernels_{tag.replace('-', '_')}"
    if not any(build_dir.glob(f"{name}*.so")):
        print(f"specdec: building the fused CPU kernels ({level}) into {build_dir} "
              "(once, ~30 s)",
              file=sys.stderr, flush=True)
    torch_lib = Path(torch.__file__).parent / "lib"
    # Link the OpenMP runtime torch itself loaded, so at::parallel_for shares its pool.
    gomp = ["-l:libgomp.so.1"] if (torch_lib / "libgomp.so.1").exists() else ["-lgomp"]
    return cpp_extension.load(
        name=name,
        sources=[str(SOURCE)],
        build_directory=str(build_dir),
        extra_cflags=build_flags(level),
        extra_ldflags=[f"-L{torch_lib}", *gomp],
        verbose=False,
    )
