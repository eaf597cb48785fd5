"""Fused CPU kernels (``cpu_kernels.cpp`` with ``vec16.h``, ``attention_tile.h``,
``attention_amx.h`` and ``tile_linear.h``),
compiled on first use.

The extension is built once per (source, torch version, CPU) into the specdec cache
directory with ``-O3 -march=native`` and reused afterwards (about a minute the first
time). Where it cannot be built (no compiler, another platform) ``load()`` returns
None and the model runs its eager PyTorch path; ``SPECDEC_KERNELS=0`` forces that.
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

SOURCE = Path(__file__).with_name("cpu_kernels.cpp")
HEADERS = ("vec16.h", "attention_tile.h", "attention_amx.h", "tile_linear.h")


def enabled_by_env() -> bool:
    return os.environ.get("SPECDEC_KERNELS", "1").lower() not in ("0", "false", "no", "off")


@functools.cache
def load() -> ModuleType | None:
    """The compiled kernels module, or None where they are off or cannot be built."""
    if not enabled_by_env():
        return None
    try:
        return _build()
    except Exception as exc:  # compiler missing, headers missing, unsupported platform
        warnings.warn(
            f"specdec: fused CPU kernels unavailable ({type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}); "
            "running the eager PyTorch path",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def _build() -> ModuleType:
    from torch.utils import cpp_extension

    from specdec.model.builder import cpuinfo_field
    from specdec.model.loader import cache_root

    key = hashlib.blake2b(digest_size=8)
    for path in (SOURCE, *(SOURCE.with_name(h) for h in HEADERS)):
        key.update(path.read_bytes())
    cpu = cpuinfo_field("flags", "Features") or platform.processor()
    key.update(f"{torch.__version__}|{platform.machine()}|{cpu}".encode())
    tag = key.hexdigest()
    build_dir = cache_root() / "kernels" / tag
    build_dir.mkdir(parents=True, exist_ok=True)
    name = f"specdec_cpu_kernels_{tag}"
    if not any(build_dir.glob(f"{name}*.so")):
        print(f"specdec: building the fused CPU kernels into {build_dir} (once, ~30 s)",
              file=sys.stderr, flush=True)
    torch_lib = Path(torch.__file__).parent / "lib"
    # Link the OpenMP runtime torch itself loaded, so at::parallel_for shares its pool.
    gomp = ["-l:libgomp.so.1"] if (torch_lib / "libgomp.so.1").exists() else ["-lgomp"]
    return cpp_extension.load(
        name=name,
        sources=[str(SOURCE)],
        build_directory=str(build_dir),
        extra_cflags=["-O3", "-march=native", "-fopenmp", "-ffp-contract=off",
                      "-fno-math-errno"],
        extra_ldflags=[f"-L{torch_lib}", *gomp],
        verbose=False,
    )
