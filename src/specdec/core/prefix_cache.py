"""Prefix cache: full KV blocks indexed by content, reused by later requests.

Life of a cached block::

    allocated (no hash) --fills with verified tokens--> cached, in use (ref >= 1)
        --owners free it--> cached, idle (ref 0, in the pool's free queue)
        --a new request's prefix matches--> cached, in use again (touched out of the queue)
        --the pool pops it for a new owner--> evicted (on_evict: leaves the index)

The index maps ``BlockHash.digest -> KVBlock``; ``block.block_hash`` holds the full
:class:`~specdec.core.block_hash.BlockHash`, so the invariant is simple: a block
has a hash if and only if the index points at it. If two requests computed the
same block (neither could hit the other's in time), only the first copy is
indexed; the second stays an ordinary block.

Eviction order is the pool's free order. ``KVCacheManager.free`` frees a request's
blocks tail first, so idle blocks are evicted least recently freed first and, within
a request, tail before head (a head block is worth more: every longer prefix needs it).

A block is registered once it is full of *verified* tokens (prompt + accepted
output), from ``allocate_slots``: its KV is written by the very step that
scheduled those tokens, before any later step can read it, and a request
admitted in the same step that hits it reads it only after the forward of each
layer wrote the whole batch's keys/values. Draft tokens are never hashed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specdec.core.block_hash import BlockHash, hash_request_blocks
from specdec.core.block_pool import BlockPool, KVBlock
from specdec.core.request import Request


@dataclass
class PrefixCacheStats:
    """Counters in tokens. A query is a request's prompt at its first admission;
    re-admissions after preemption are counted apart (they re-find their own blocks)."""

    queries: int = 0  # prompt tokens looked up at first admission
    hits: int = 0  # of those, tokens served from the cache (never the last prompt token)
    readmission_hits: int = 0  # tokens re-found by requests coming back from preemption
    evictions: int = 0  # cached blocks dropped because the pool needed a free block

    def as_dict(self, num_cached_blocks: int) -> dict[str, Any]:
        return {
            "prefix_cache_queries": self.queries,
            "prefix_cache_hits": self.hits,
            "prefix_cache_hit_rate": self.hits / self.queries if self.queries else 0.0,
            "prefix_cache_readmission_hits": self.readmission_hits,
            "prefix_cache_evictions": self.evictions,
            "prefix_cache_blocks": num_cached_blocks,
        }


@dataclass
class _RequestKeys:
    """What the cache remembers about a request while it holds blocks."""

    hashes: list[BlockHash] = field(default_factory=list)  # keys of its full blocks so far
    num_registered: int = 0  # leading blocks already offered to the index
    admitted: bool = False  # its first registration (= admission) has been counted


class HashChainPrefixCache:
    """The :class:`~specdec.core.kv_cache_manager.PrefixCache` of the prefix-caching plugin."""

    def __init__(self, pool: BlockPool, block_size: int):
        self.pool = pool
        self.block_size = block_size
        self.stats = PrefixCacheStats()
        self._index: dict[bytes, KVBlock] = {}
        self._requests: dict[str, _RequestKeys] = {}
        pool.on_evict.append(self._on_evict)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._index)

    def lookup(self, block_hash: BlockHash) -> KVBlock | None:
        """The block holding exactly this content, or None (a digest collision is a miss)."""
        block = self._index.get(block_hash.digest)
        if block is None or block.block_hash != block_hash:
            return None
        return block

    # ------------------------------------------------------ PrefixCache protocol

    def find_cached_blocks(self, request: Request) -> list[KVBlock]:
        """Longest run of cached blocks matching the request's tokens from the start.

        Pure lookup: no ref counts change and nothing is counted (the scheduler may
        ask again next step if the request could not be admitted).
        """
        keys = self._keys(request)
        hash_request_blocks(request, self.block_size, request.num_tokens, keys.hashes)
        hits: list[KVBlock] = []
        for block_hash in keys.hashes:
            block = self.lookup(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits

    def cache_full_blocks(self, request: Request, blocks: list[KVBlock], num_tokens: int) -> None:
        """Index the request's blocks that are full within its first ``num_tokens``.

        The first call after admission also records the query: the blocks that
        already carry a hash at that moment are exactly the prefix hits attached.
        """
        keys = self._keys(request)
        if not keys.admitted:
            keys.admitted = True
            self._count_admission(request, blocks)
        hashes = hash_request_blocks(request, self.block_size, num_tokens, keys.hashes)
        # ``hashes`` may run ahead (a lookup hashes the whole prompt): stop at ``num_tokens``.
        num_full = min(num_tokens // self.block_size, len(hashes), len(blocks))
        for i in range(keys.num_registered, num_full):
            block = blocks[i]
            if block.block_hash is not None:
                continue  # a hit: indexed already, with this very content
            if hashes[i].digest not in self._index:
                block.block_hash = hashes[i]
                self._index[hashes[i].digest] = block
        keys.num_registered = max(keys.num_registered, num_full)

    def forget_request(self, request: Request) -> None:
        """The request released its blocks; its blocks stay indexed until evicted."""
        self._requests.pop(request.request_id, None)

    # ------------------------------------------------------------------ helpers

    def _keys(self, request: Request) -> _RequestKeys:
        keys = self._requests.get(request.request_id)
        if keys is None:
            keys = self._requests[request.request_id] = _RequestKeys()
        return keys

    def _count_admission(self, request: Request, blocks: list[KVBlock]) -> None:
        num_hit_blocks = 0
        for block in blocks:
            if block.block_hash is None:
                break
            num_hit_blocks += 1
        hit_tokens = num_hit_blocks * self.block_size
        if request.num_preemptions == 0:
            self.stats.queries += request.num_prompt_tokens
            self.stats.hits += hit_tokens
        else:
            self.stats.readmission_hits += hit_tokens

    def _on_evict(self, block: KVBlock) -> None:
        block_hash = block.block_hash
        if isinstance(block_hash, BlockHash) and self._index.get(block_hash.digest) is block:
            del self._index[block_hash.digest]
            self.stats.evictions += 1
