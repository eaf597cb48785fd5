"""Vocabulary walks of single terminals, shared by every grammar in the process.

Most JSON-schema grammars share their dear terminals (a JSON string: a walk from
inside one visits the whole vocabulary, ~4 ms). A walk from a lexer state where one
terminal alone is alive does not depend on the grammar around it, so it is kept here
keyed by (vocabulary, terminal DFA, DFA state) and reused by every grammar and
request; a grammar's own first visit to such a state is then a dictionary hit.

Bounded by bytes (LRU). Entries store the closing terminal as -1 and are handed out
with the caller's terminal index.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict

import numpy as np

from specdec.structured.cfg.byte_dfa import ByteDFA
from specdec.structured.cfg.token_walk import WalkResult

MiB = 1 << 20
MAX_BYTES = int(os.environ.get("SPECDEC_WALK_STORE_MIB", "256")) * MiB
Key = tuple[str, str, int]  # (vocabulary fingerprint, terminal fingerprint, DFA state)


def dfa_fingerprint(dfa: ByteDFA) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(repr(dfa.table.shape).encode())
    h.update(dfa.table.tobytes())
    h.update(dfa.accepting.tobytes())
    return h.hexdigest()


class WalkStore:
    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: OrderedDict[Key, tuple[np.ndarray, np.ndarray | None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Key, terminal: int) -> WalkResult | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
        packed, closing = entry
        return WalkResult(packed, {} if closing is None else {terminal: closing})

    def contains(self, key: Key) -> bool:
        return key in self._entries

    def put(self, key: Key, result: WalkResult) -> None:
        (closing,) = result.boundaries.values() or (None,)
        size = result.packed.nbytes + (0 if closing is None else closing.nbytes)
        with self._lock:
            if key in self._entries or size > self.max_bytes:
                return
            self._entries[key] = (result.packed, closing)
            self.nbytes += size
            while self.nbytes > self.max_bytes:
                _, (packed, old) = self._entries.popitem(last=False)
                self.nbytes -= packed.nbytes + (0 if old is None else old.nbytes)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0


SHARED = WalkStore()
