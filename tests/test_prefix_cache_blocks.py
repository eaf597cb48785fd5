"""Exact block ids, free-queue order and eviction order of the prefix cache.

No model: requests are driven through ``KVCacheManager`` the way the scheduler
does (look up hits, allocate slots, advance ``num_computed_tokens``, free), on a
small pool with ``block_size = 4`` so every block id can be predicted by hand.
"""

from __future__ import annotations

import hashlib

import pytest

from specdec.core import block_hash as block_hash_module
from specdec.core.block_hash import BlockHash
from specdec.core.kv_cache_manager import KVCacheManager
from specdec.core.prefix_cache import HashChainPrefixCache
from specdec.core.request import Request
from specdec.sampling_params import SamplingParams

BS = 4


def make_kv(num_blocks: int) -> tuple[KVCacheManager, HashChainPrefixCache]:
    kv = KVCacheManager(num_blocks, BS)
    cache = HashChainPrefixCache(kv.pool, BS)
    kv.prefix_cache = cache
    return kv, cache


def make_request(rid: str, tokens, salt: str | None = None) -> Request:
    extra = {} if salt is None else {"cache_salt": salt}
    return Request(rid, None, list(tokens), SamplingParams(extra=extra))


def admit(kv: KVCacheManager, req: Request, num_new: int | None = None) -> list[int]:
    """What the scheduler does at admission; returns the ids of the prefix hits."""
    hits = kv.get_computed_blocks(req)
    num_cached = len(hits) * BS
    num_new = req.num_tokens - num_cached if num_new is None else num_new
    assert kv.allocate_slots(req, num_new, hits) is not None
    req.num_computed_tokens = num_cached + num_new
    return [b.block_id for b in hits]


def decode(kv: KVCacheManager, req: Request, token: int) -> None:
    """The request sampled ``token``; the next step computes it."""
    req.output_token_ids.append(token)
    assert kv.allocate_slots(req, 1) is not None
    req.num_computed_tokens += 1


def free_queue_ids(kv: KVCacheManager) -> list[int]:
    return [b.block_id for b in kv.pool.free_queue]


def cached_ids(kv: KVCacheManager) -> list[int]:
    return [b.block_id for b in kv.pool.blocks if b.block_hash is not None]


def test_shared_prefix_reuses_blocks_and_partial_blocks_are_not_cached():
    kv, cache = make_kv(10)
    common = list(range(1, 9))  # two full blocks
    r0 = make_request("r0", common + [9, 10, 11])
    assert admit(kv, r0) == []
    assert kv.block_ids("r0") == [0, 1, 2]
    assert cached_ids(kv) == [0, 1]  # block 2 holds 3 tokens: partial, not cached

    r1 = make_request("r1", common + [20, 21, 22])
    assert admit(kv, r1) == [0, 1]
    assert kv.block_ids("r1") == [0, 1, 3]
    assert [kv.pool.blocks[i].ref_cnt for i in (0, 1, 2, 3)] == [2, 2, 1, 1]
    assert free_queue_ids(kv) == [4, 5, 6, 7, 8, 9]

    kv.free(r0)  # tail first: only block 2 becomes idle
    assert free_queue_ids(kv) == [4, 5, 6, 7, 8, 9, 2]
    kv.free(r1)
    assert free_queue_ids(kv) == [4, 5, 6, 7, 8, 9, 2, 3, 1, 0]
    assert cached_ids(kv) == [0, 1]  # idle cached blocks keep their hash

    r2 = make_request("r2", common + [30, 31, 32, 33, 34])
    assert admit(kv, r2) == [0, 1]  # revived: taken out of the free queue
    assert kv.block_ids("r2") == [0, 1, 4, 5]
    assert free_queue_ids(kv) == [6, 7, 8, 9, 2, 3]
    assert cached_ids(kv) == [0, 1, 4]
    assert cache.stats.queries == 11 + 11 + 13
    assert cache.stats.hits == 8 + 8
    assert cache.stats.evictions == 0


def test_eviction_is_lru_and_tail_before_head():
    kv, cache = make_kv(6)
    r0 = make_request("r0", range(0, 12))
    r1 = make_request("r1", range(100, 112))
    admit(kv, r0)
    assert kv.block_ids("r0") == [0, 1, 2]
    assert cached_ids(kv) == [0, 1, 2]
    kv.free(r0)
    admit(kv, r1)
    assert kv.block_ids("r1") == [3, 4, 5]
    kv.free(r1)
    assert free_queue_ids(kv) == [2, 1, 0, 5, 4, 3]

    r2 = make_request("r2", range(200, 208))
    admit(kv, r2)
    # The least recently freed request (r0) goes first, its tail block before its head.
    assert kv.block_ids("r2") == [2, 1]
    assert cache.stats.evictions == 2
    assert cached_ids(kv) == [0, 1, 2, 3, 4, 5]  # blocks 1 and 2 now hold r2's tokens

    r3 = make_request("r3", list(range(0, 12)) + [99])
    assert admit(kv, r3) == [0]  # r0's head block survived; the chain breaks at block 1


def test_full_last_block_is_cached_but_never_hit_in_full():
    kv, _ = make_kv(8)
    r0 = make_request("r0", range(8))
    admit(kv, r0)
    kv.free(r0)
    r1 = make_request("r1", range(8))  # identical prompt: the last token must be recomputed
    assert admit(kv, r1) == [0]
    assert r1.num_computed_tokens == 8


def test_revived_block_becomes_most_recently_used():
    kv, _ = make_kv(6)
    r0 = make_request("r0", list(range(8)) + [50])
    r1 = make_request("r1", list(range(100, 108)) + [50])
    admit(kv, r0)  # blocks 0, 1, 2
    kv.free(r0)
    admit(kv, r1)  # blocks 3, 4, 5
    kv.free(r1)
    r2 = make_request("r2", list(range(8)) + [60])
    assert admit(kv, r2) == [0, 1]  # r0's prefix comes back into use...
    kv.free(r2)  # ...and is freed after r1's, so r1's blocks are now older
    assert free_queue_ids(kv) == [5, 4, 3, 2, 1, 0]


def test_block_is_cached_when_decoding_fills_it():
    kv, _ = make_kv(8)
    r0 = make_request("r0", range(6))
    admit(kv, r0)
    assert cached_ids(kv) == [0]
    decode(kv, r0, 70)  # 7 tokens: block 1 holds 3
    assert cached_ids(kv) == [0]
    decode(kv, r0, 71)  # the step computing token 71 fills block 1
    assert cached_ids(kv) == [0, 1]
    assert kv.pool.blocks[1].block_hash.token_ids == (4, 5, 70, 71)


def test_draft_tokens_are_never_cached():
    kv, _ = make_kv(8)
    r0 = make_request("r0", range(6))
    admit(kv, r0)
    r0.output_token_ids.append(70)  # sampled; 7 tokens, 6 computed
    r0.draft_token_ids = [71, 72, 73]  # would fill block 1 and start block 2
    assert kv.allocate_slots(r0, 4) is not None
    assert kv.block_ids("r0") == [0, 1, 2]
    assert cached_ids(kv) == [0]  # block 1 is full only with drafts: not cached
    # Verification rejects 71 and samples 80 instead (the engine's accept step).
    r0.num_computed_tokens += 4 - 3
    r0.draft_token_ids.clear()
    decode(kv, r0, 80)
    assert cached_ids(kv) == [0, 1]
    assert kv.pool.blocks[1].block_hash.token_ids == (4, 5, 70, 80)


def test_chunked_prefill_caches_each_chunk_as_it_fills():
    kv, _ = make_kv(8)
    r0 = make_request("r0", range(14))
    admit(kv, r0, num_new=6)
    assert cached_ids(kv) == [0]
    assert kv.allocate_slots(r0, 6) is not None
    r0.num_computed_tokens += 6
    assert cached_ids(kv) == [0, 1, 2]
    r1 = make_request("r1", range(14))  # a twin arriving mid-prefill hits what is done
    assert admit(kv, r1) == [0, 1, 2]


def test_cache_salt_isolates_tenants():
    kv, _ = make_kv(16)
    tokens = list(range(13))
    admit(kv, make_request("a1", tokens, salt="tenant-a"))
    assert admit(kv, make_request("b1", tokens, salt="tenant-b")) == []
    assert admit(kv, make_request("plain", tokens)) == []
    assert admit(kv, make_request("a2", tokens, salt="tenant-a")) == [0, 1, 2]


def test_digest_collision_is_a_miss(monkeypatch):
    class Constant:
        def __init__(self, payload: bytes):
            pass

        def digest(self) -> bytes:
            return b"every block collides"

    monkeypatch.setattr(block_hash_module, "hashlib", type("H", (), {"sha256": Constant}))
    kv, _ = make_kv(8)
    admit(kv, make_request("r0", range(9)))
    assert cached_ids(kv) == [0]  # block 1 has the same digest as block 0: not indexed
    assert admit(kv, make_request("r1", range(50, 59))) == []  # same digest, other tokens
    assert admit(kv, make_request("r2", range(9))) == [0]


def test_admission_that_does_not_fit_changes_nothing_and_is_counted_once():
    kv, cache = make_kv(4)
    r0 = make_request("r0", range(12))
    admit(kv, r0)
    kv.free(r0)  # blocks 0 and 1 cached and idle
    hog = make_request("hog", range(100, 101))
    admit(kv, hog)  # takes block 3, the only never-cached free block
    r1 = make_request("r1", list(range(8)) + list(range(200, 208)))  # 2 hits + 2 new blocks
    hits = kv.get_computed_blocks(r1)
    assert [b.block_id for b in hits] == [0, 1]
    assert kv.allocate_slots(r1, 8, hits) is None  # needs 2 new, only block 2 is spare
    assert free_queue_ids(kv) == [2, 1, 0]
    kv.free(hog)
    assert admit(kv, r1) == [0, 1]
    assert kv.block_ids("r1") == [0, 1, 2, 3]
    assert cache.stats.queries == 12 + 1 + 16
    assert cache.stats.hits == 8


def test_preempted_request_refinds_its_own_blocks_and_is_counted_apart():
    kv, cache = make_kv(8)
    r0 = make_request("r0", range(6))
    admit(kv, r0)
    for t in (70, 71, 72):
        decode(kv, r0, t)
    kv.free(r0)  # preemption: blocks back to the pool, request recomputed later
    r0.num_computed_tokens = 0
    r0.num_preemptions += 1
    assert admit(kv, r0) == [0, 1]  # prompt and accepted output, all of it but the last
    assert cache.stats.queries == 6
    assert cache.stats.readmission_hits == 8


def test_hash_chain_depends_on_parent_tokens_and_salt():
    a = block_hash_module.hash_block(None, [1, 2, 3, 4])
    b = block_hash_module.hash_block(a, [5, 6, 7, 8])
    b_other_parent = block_hash_module.hash_block(
        block_hash_module.hash_block(None, [9, 2, 3, 4]), [5, 6, 7, 8]
    )
    salted = block_hash_module.hash_block(None, [1, 2, 3, 4], (("cache_salt", "x"),))
    assert isinstance(a, BlockHash) and b.parent == a.digest
    assert len({a.digest, b.digest, b_other_parent.digest, salted.digest}) == 4
    assert a == block_hash_module.hash_block(None, (1, 2, 3, 4))
    assert len(a.digest) == hashlib.sha256().digest_size


@pytest.mark.parametrize("salt", [3, ""])
def test_plugin_rejects_bad_salt(salt):
    from specdec.plugins.prefix_caching import PrefixCachingPlugin

    with pytest.raises(ValueError, match="cache_salt"):
        PrefixCachingPlugin().specdec_request_added(make_request("r", [1], salt=salt))
