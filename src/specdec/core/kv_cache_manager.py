"""Per-request block tables on top of the block pool.

The scheduler asks only two things: which cached blocks a new request can reuse
(:meth:`get_computed_blocks`) and whether it can grow by ``n`` tokens
(:meth:`allocate_slots`). Prefix caching plugs in as a :class:`PrefixCache`
object (see ``specdec.plugins.prefix_caching``) without changes here.
"""

from __future__ import annotations

from typing import Protocol

from specdec.core.block_pool import BlockPool, KVBlock
from specdec.core.request import Request


class PrefixCache(Protocol):
    def find_cached_blocks(self, request: Request) -> list[KVBlock]:
        """Longest run of cached full blocks matching the request's prompt prefix."""

    def cache_full_blocks(self, request: Request, blocks: list[KVBlock], num_tokens: int) -> None:
        """Register the request's blocks that are full within its first ``num_tokens``
        (verified tokens only, never drafts)."""

    def forget_request(self, request: Request) -> None:
        """The request released its blocks (finished, aborted or preempted)."""


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.pool = BlockPool(num_blocks)
        self.req_blocks: dict[str, list[KVBlock]] = {}
        self.prefix_cache: PrefixCache | None = None

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def get_computed_blocks(self, request: Request) -> list[KVBlock]:
        if self.prefix_cache is None or request.num_computed_tokens:
            return []
        blocks = self.prefix_cache.find_cached_blocks(request)
        # The last token must always be computed so the request gets its logits.
        max_blocks = (request.num_tokens - 1) // self.block_size
        return blocks[:max_blocks]

    def allocate_slots(
        self, request: Request, num_new_tokens: int, new_computed_blocks: list[KVBlock] = ()
    ) -> list[KVBlock] | None:
        """Grow the request's table so it covers computed + ``num_new_tokens`` tokens.

        ``new_computed_blocks`` are prefix-cache hits attached in front (admission
        only). Returns the request's blocks, or None (nothing changed) if the pool
        cannot supply them now.
        """
        blocks = self.req_blocks.get(request.request_id, [])
        num_computed = request.num_computed_tokens + len(new_computed_blocks) * self.block_size
        needed = cdiv(num_computed + num_new_tokens, self.block_size)
        num_new_blocks = needed - len(blocks) - len(new_computed_blocks)
        reviving = sum(1 for b in new_computed_blocks if b.ref_cnt == 0)
        if num_new_blocks > self.pool.num_free_blocks - reviving:
            return None
        if new_computed_blocks:
            self.pool.touch(new_computed_blocks)
            blocks = blocks + list(new_computed_blocks)
        if num_new_blocks > 0:
            blocks = blocks + self.pool.allocate(num_new_blocks)
        self.req_blocks[request.request_id] = blocks
        if self.prefix_cache is not None:
            verified = min(num_computed + num_new_tokens, request.num_tokens)
            self.prefix_cache.cache_full_blocks(request, blocks, verified)
        return blocks

    def free(self, request: Request) -> None:
        """Release all of the request's blocks, tail first (tail evicted before head)."""
        blocks = self.req_blocks.pop(request.request_id, [])
        self.pool.free(reversed(blocks))
        if self.prefix_cache is not None:
            self.prefix_cache.forget_request(request)

    def trim(self, request: Request, num_tokens: int) -> None:
        """Free the request's blocks past those needed for ``num_tokens`` tokens (the
        KV of rejected draft tokens). Such blocks hold only unverified positions, so
        no prefix cache ever registered them."""
        blocks = self.req_blocks.get(request.request_id)
        if blocks is None:
            return
        keep = cdiv(num_tokens, self.block_size)
        if len(blocks) > keep:
            self.pool.free(reversed(blocks[keep:]))
            del blocks[keep:]

    def block_ids(self, request_id: str) -> list[int]:
        return [b.block_id for b in self.req_blocks.get(request_id, [])]

    def blocks_needed(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.block_size)
