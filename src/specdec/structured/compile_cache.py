"""Byte-bounded LRU caches for compiled constraints: one in memory, one on disk.

Every distinct regex, grammar or schema adds an entry, so both caches are bounded by
bytes and drop the least recently used entries first. The disk cache may be shared by
several processes: a file another process deleted is only a miss (it is rebuilt).
"""

from __future__ import annotations

import os
import pickle
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Hashable
from pathlib import Path
from typing import Any

MiB = 2**20


class MemoryCache:
    """``key -> value`` with a size each; over ``max_bytes``, the least recently used go."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.nbytes = 0  # total size of the entries held
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Hashable, value: Any, nbytes: int) -> None:
        """Hold ``value``; one larger than the whole budget is not held at all."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            if nbytes > self.max_bytes:
                return
            self._entries[key] = (value, nbytes)
            self.nbytes += nbytes
            self._evict()

    def resize(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            self._evict()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _evict(self) -> None:
        while self.nbytes > self.max_bytes:
            _, (_, nbytes) = self._entries.popitem(last=False)
            self.nbytes -= nbytes


class DiskCache:
    """Pickle files, ``*.pkl`` in one directory, kept under ``max_bytes`` in total.

    A load touches the file (its mtime is the last use); a store writes atomically, then
    deletes the least recently used files until the directory fits the budget.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes

    def load(self, path: Path) -> tuple[Any, int] | None:
        """The value stored at ``path`` and its size in bytes, or None (missing, stale)."""
        try:
            data = path.read_bytes()
            value = pickle.loads(data)
        except Exception:  # noqa: BLE001 - missing, truncated or stale entry: rebuild
            return None
        try:
            os.utime(path)
        except OSError:
            pass
        return value, len(data)

    def store(self, path: Path, data: bytes) -> None:
        """Write ``data`` (a pickle) at ``path`` unless it alone exceeds the budget."""
        if len(data) > self.max_bytes:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:
            return  # a read-only cache only costs compile time
        self.evict(path.parent)

    def evict(self, directory: Path) -> None:
        files = []
        for path in directory.glob("*.pkl"):
            try:
                st = path.stat()
            except OSError:
                continue
            files.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            try:
                path.unlink()
            except OSError:
                continue
            total -= size


def dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
