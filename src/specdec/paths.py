"""Where specdec keeps its on-disk caches.

The root is ``$SPECDEC_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/specdec``, else
``~/.cache/specdec``; it is read on every call, so a changed environment takes effect at once.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("SPECDEC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "specdec"
    )
    return Path(base)


def kernels_dir() -> Path:
    """Compiled CPU kernel extensions, one sub-folder per build tag."""
    return cache_root() / "kernels"


def gguf_dir() -> Path:
    """GGUF files converted to HF directories, keyed by content hash."""
    return cache_root() / "gguf"


def structured_dir() -> Path:
    """Compiled constraint artifacts (grammar tables, vocabulary walks, regex indexes)."""
    return cache_root() / "structured"


def dtype_auto_file() -> Path:
    """The measured fastest matmul dtype per CPU, for ``dtype="auto"``."""
    return cache_root() / "dtype-auto.json"
