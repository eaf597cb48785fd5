"""KV block pool: fixed blocks, per-block ref counts and an ordered free queue.

Free blocks sit in a doubly linked queue; allocation pops from the head, freeing
appends at the tail. A block that keeps a content hash after being freed (prefix
caching) stays reusable until it is popped for a new owner: the pool then calls
the ``on_evict`` listeners so the cache can forget it. The eviction order is thus
the free order (least recently freed first), and a cached block can be revived
with :meth:`touch`, which takes it out of the queue wherever it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


class KVBlock:
    __slots__ = ("block_id", "ref_cnt", "block_hash", "prev_free", "next_free")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: object | None = None  # set by a prefix cache when the block is full
        self.prev_free: KVBlock | None = None
        self.next_free: KVBlock | None = None

    def __repr__(self) -> str:
        cached = self.block_hash is not None
        return f"KVBlock(id={self.block_id}, ref={self.ref_cnt}, cached={cached})"


class FreeBlockQueue:
    """Doubly linked list of free blocks with O(1) popleft, append and remove."""

    def __init__(self, blocks: Iterable[KVBlock]):
        self._head = KVBlock(-1)
        self._tail = KVBlock(-1)
        self._head.next_free, self._tail.prev_free = self._tail, self._head
        self.num_free = 0
        for block in blocks:
            self.append(block)

    def popleft(self) -> KVBlock:
        block = self._head.next_free
        if block is self._tail or block is None:
            raise RuntimeError("no free KV blocks")
        self.remove(block)
        return block

    def remove(self, block: KVBlock) -> None:
        block.prev_free.next_free = block.next_free
        block.next_free.prev_free = block.prev_free
        block.prev_free = block.next_free = None
        self.num_free -= 1

    def append(self, block: KVBlock) -> None:
        last = self._tail.prev_free
        last.next_free, block.prev_free = block, last
        block.next_free, self._tail.prev_free = self._tail, block
        self.num_free += 1

    def __iter__(self):
        block = self._head.next_free
        while block is not self._tail:
            yield block
            block = block.next_free


class BlockPool:
    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"the KV pool needs at least one block, got {num_blocks}")
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.on_evict: list[Callable[[KVBlock], None]] = []
        self.num_evictions = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.num_free

    def allocate(self, n: int) -> list[KVBlock]:
        """Take ``n`` blocks off the free queue (evicting cached content) with ref 1."""
        if n > self.free_queue.num_free:
            raise RuntimeError(f"asked for {n} KV blocks, {self.free_queue.num_free} free")
        out = []
        for _ in range(n):
            block = self.free_queue.popleft()
            if block.block_hash is not None:
                for listener in self.on_evict:
                    listener(block)
                block.block_hash = None
                self.num_evictions += 1
            block.ref_cnt = 1
            out.append(block)
        return out

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Share already-filled blocks: ref count up, out of the free queue if idle."""
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_queue.remove(block)
            block.ref_cnt += 1

    def free(self, blocks: Iterable[KVBlock]) -> None:
        """Drop one reference each; idle blocks join the queue in the given order
        (so pass the blocks that should be evicted first, first)."""
        for block in blocks:
            if block.ref_cnt <= 0:
                raise RuntimeError(f"double free of {block}")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self.free_queue.append(block)
