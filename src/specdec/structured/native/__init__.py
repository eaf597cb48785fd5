"""Small C helpers for the grammar engine, built with the system C compiler on first use.

Plain C99 (no SIMD), loaded through ctypes, which releases the GIL during the call.
When there is no compiler, or ``SPECDEC_NATIVE_WALK=0``, the loaders return None and
callers keep their numpy implementation (same results, slower).
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

SOURCES = [Path(__file__).with_name(name) for name in ("trie_walk.c", "lexer_product.c")]
_P = ctypes.c_void_p


class Trie(ctypes.Structure):
    """``struct trie`` of trie_walk.c (int32 array addresses)."""

    _fields_ = [(name, _P) for name in ("byte", "child_start", "num_children",
                                        "token_first", "token_count", "token_order")]


class Scratch(ctypes.Structure):
    """``struct scratch`` of trie_walk.c."""

    _fields_ = [(name, _P) for name in ("boundary_nodes", "boundary_terminals",
                                        "stack_nodes", "stack_states")] + \
        [("capacity", ctypes.c_int64), ("num_boundaries", ctypes.c_int64),
         ("closing_low", ctypes.c_int32), ("closing_high", ctypes.c_int32)]


@functools.cache
def _library():
    if os.environ.get("SPECDEC_NATIVE_WALK", "1") == "0":
        return None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    from specdec.paths import cache_root

    h = hashlib.blake2b(digest_size=8)
    for source in SOURCES:
        h.update(source.read_bytes())
    target = cache_root() / "native" / f"grammar-{h.hexdigest()}.so"
    try:
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(f".{os.getpid()}.tmp")
            subprocess.run([compiler, "-O2", "-std=c99", "-shared", "-fPIC",
                            *map(str, SOURCES), "-o", str(partial)],
                           check=True, capture_output=True, timeout=120)
            os.replace(partial, target)
        return ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"specdec: native grammar helpers unavailable ({exc}); using numpy",
              file=sys.stderr)
        return None


@functools.cache
def load_trie_walk():
    """``trie_walk(table, winner, trie*, scratch*, start_nodes, num_start, start_state,
    inside_mask)``, or None (see the module docstring)."""
    library = _library()
    if library is None:
        return None
    function = library.trie_walk
    function.restype = ctypes.c_int64
    function.argtypes = [_P, _P, _P, _P, _P, ctypes.c_int64, ctypes.c_int32, _P]
    return function


@functools.cache
def load_byte_classes():
    """``byte_classes(table, rows, class_of, first)``, or None."""
    library = _library()
    if library is None:
        return None
    function = library.byte_classes
    function.restype = ctypes.c_int32
    function.argtypes = [_P, ctypes.c_int64, _P, _P]
    return function


@functools.cache
def load_lexer_product():
    """``lexer_product(tables, offsets, k, columns, keys, out, capacity, slots,
    hash_size)``, or None."""
    library = _library()
    if library is None:
        return None
    function = library.lexer_product
    function.restype = ctypes.c_int64
    function.argtypes = [_P, _P, ctypes.c_int32, ctypes.c_int32, _P, _P, ctypes.c_int64, _P,
                         ctypes.c_int64]
    return function
