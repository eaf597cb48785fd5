"""Small C helpers for the grammar engine, built with the system C compiler on first use.

Plain C99 (no SIMD), loaded through ctypes, which releases the GIL during the call.
When there is no compiler, or ``SPECDEC_NATIVE_WALK=0``, :func:`load_trie_walk` returns
None and callers keep their numpy implementation (same results, ~20x slower per walk).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("trie_walk.c")


@functools.cache
def load_trie_walk():
    """The ``trie_walk`` C function, or None (see the module docstring)."""
    if os.environ.get("SPECDEC_NATIVE_WALK", "1") == "0":
        return None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    from specdec.paths import cache_root

    digest = hashlib.blake2b(SOURCE.read_bytes(), digest_size=8).hexdigest()
    target = cache_root() / "native" / f"trie_walk-{digest}.so"
    try:
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(f".{os.getpid()}.tmp")
            subprocess.run([compiler, "-O2", "-std=c99", "-shared", "-fPIC", str(SOURCE),
                            "-o", str(partial)], check=True, capture_output=True, timeout=120)
            os.replace(partial, target)
        library = ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"specdec: native trie walk unavailable ({exc}); using numpy", file=sys.stderr)
        return None
    function = library.trie_walk
    function.restype = ctypes.c_int64
    function.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_int64, ctypes.c_int32] + \
        [ctypes.c_void_p] * 7 + [ctypes.c_int64]
    return function
