"""Block-pool invariants with prefix caching on, under a hypothesis state machine.

The real scheduler, KV-cache manager and prefix cache run against an emulated
forward: instead of keys/values, each KV slot records the token prefix whose
last token it holds. After every step, every token a scheduled request attends
to must hold exactly its own prefix, so a wrong hit (a block cached before it was
computed, a draft cached before acceptance, a tenant reading another's block)
shows up as a wrong slot, whatever the bookkeeping says.

Invariants after every rule: no block leaks, no request holds a block twice, ref
counts equal the number of owners, the free queue is exactly the blocks with ref
0, a block has a hash iff the index points at it, and a cached block in a
request's table holds that request's verified tokens and cache salt.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from specdec.core.block_hash import extra_keys_of
from specdec.core.kv_cache_manager import KVCacheManager
from specdec.core.prefix_cache import HashChainPrefixCache
from specdec.core.request import Request
from specdec.core.scheduler import Scheduler, SchedulerConfig
from specdec.sampling_params import SamplingParams

BS = 4
NUM_BLOCKS = 12
PREFIXES = [(), (1, 2, 3, 4), (1, 2, 3, 4, 5, 6, 7, 8, 1), (7, 7, 7, 7, 7, 2)]
TOKENS = st.integers(0, 3)  # a tiny alphabet so contents repeat and blocks are shared


class PrefixCacheMachine(RuleBasedStateMachine):
    @initialize(
        budget=st.integers(1, 24),
        threshold=st.one_of(st.none(), st.integers(1, 8)),
        max_seqs=st.integers(1, 4),
    )
    def build(self, budget: int, threshold: int | None, max_seqs: int) -> None:
        self.kv = KVCacheManager(NUM_BLOCKS, BS)
        self.cache = HashChainPrefixCache(self.kv.pool, BS)
        self.kv.prefix_cache = self.cache
        self.scheduler = Scheduler(SchedulerConfig(budget, max_seqs, threshold), self.kv)
        self.slots: dict[int, tuple] = {}  # KV slot -> (salt, token prefix) it holds
        self.num_added = 0

    # -------------------------------------------------------------------- rules

    @rule(
        prefix=st.sampled_from(PREFIXES),
        tail=st.lists(TOKENS, min_size=1, max_size=8),
        max_tokens=st.integers(1, 8),
        salt=st.sampled_from([None, None, "tenant-b"]),
    )
    def add_request(self, prefix, tail, max_tokens: int, salt: str | None) -> None:
        extra = {} if salt is None else {"cache_salt": salt}
        params = SamplingParams(max_tokens=max_tokens, extra=extra)
        req = Request(f"r{self.num_added}", None, list(prefix) + tail, params)
        self.num_added += 1
        self.scheduler.add(req)

    @precondition(lambda self: self.scheduler.has_unfinished())
    @rule(data=st.data())
    def abort(self, data) -> None:
        everyone = list(self.scheduler.running) + list(self.scheduler.waiting)
        self.scheduler.remove(data.draw(st.sampled_from(everyone)))

    @precondition(lambda self: self.scheduler.decoding_requests())
    @rule(data=st.data())
    def propose_drafts(self, data) -> None:
        for req in self.scheduler.decoding_requests():
            room = req.sampling_params.max_tokens - len(req.output_token_ids) - 1
            req.draft_token_ids = data.draw(st.lists(TOKENS, max_size=max(0, min(3, room))))

    @precondition(lambda self: self.scheduler.has_unfinished())
    @rule(data=st.data())
    def step(self, data) -> None:
        out = self.scheduler.schedule()
        steps = [
            (s, s.start, s.request.all_token_ids + s.request.draft_token_ids)
            for s in out.scheduled
        ]
        for s, start, tokens in steps:  # the forward writes every new token's KV first...
            for p in range(start, start + s.num_tokens):
                self.slots[self._slot(s.block_ids, p)] = self._content(s.request, tokens, p)
        for s, start, tokens in steps:  # ...then each request reads its whole context
            for p in range(start + s.num_tokens):
                assert self.slots.get(self._slot(s.block_ids, p)) == self._content(
                    s.request, tokens, p
                ), f"{s.request.request_id} reads a wrong KV at position {p}"
        for s, _, _ in steps:
            self._advance(s.request, s.num_tokens, s.num_draft_tokens, data)

    # --------------------------------------------------------------- invariants

    @invariant()
    def blocks_are_owned_consistently(self) -> None:
        if not hasattr(self, "kv"):
            return
        owners = Counter()
        for rid, blocks in self.kv.req_blocks.items():
            ids = [b.block_id for b in blocks]
            assert len(ids) == len(set(ids)), f"{rid} holds a block twice: {ids}"
            owners.update(ids)
        pool = self.kv.pool
        for block in pool.blocks:
            assert block.ref_cnt == owners[block.block_id], block
        queue = [b.block_id for b in pool.free_queue]
        assert len(queue) == len(set(queue)) == pool.num_free_blocks
        assert set(queue) == {b.block_id for b in pool.blocks if b.ref_cnt == 0}
        assert len(owners) + len(queue) == pool.num_blocks  # nothing leaked

    @invariant()
    def index_matches_block_hashes(self) -> None:
        if not hasattr(self, "kv"):
            return
        hashed = [b for b in self.kv.pool.blocks if b.block_hash is not None]
        assert self.cache.num_cached_blocks == len(hashed)
        for block in hashed:
            assert self.cache.lookup(block.block_hash) is block

    @invariant()
    def cached_blocks_hold_verified_tokens(self) -> None:
        if not hasattr(self, "kv"):
            return
        waiting = {r.request_id for r in self.scheduler.waiting}
        assert not waiting & set(self.kv.req_blocks), "a waiting request holds blocks"
        for req in self.scheduler.running:
            tokens = req.all_token_ids
            for i, block in enumerate(self.kv.req_blocks.get(req.request_id, [])):
                if block.block_hash is None:
                    continue
                assert block.block_hash.token_ids == tuple(tokens[i * BS : (i + 1) * BS])
                assert block.block_hash.extra_keys == extra_keys_of(req)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _slot(block_ids: list[int], position: int) -> int:
        return block_ids[position // BS] * BS + position % BS

    @staticmethod
    def _content(req: Request, tokens: list[int], position: int) -> tuple:
        return req.sampling_params.extra.get("cache_salt"), tuple(tokens[: position + 1])

    def _advance(self, req: Request, num_tokens: int, num_drafts: int, data) -> None:
        """What the engine does after the forward: accept drafts, sample, maybe finish."""
        samples = req.num_computed_tokens + num_tokens >= req.num_tokens_with_drafts
        req.num_computed_tokens += num_tokens
        if not samples:
            return
        drafts = req.draft_token_ids[:num_drafts]
        num_accepted = data.draw(st.integers(0, len(drafts)))
        rejected = drafts[num_accepted] if num_accepted < len(drafts) else None
        bonus = data.draw(TOKENS.filter(lambda t: t != rejected))
        req.num_computed_tokens -= len(drafts) - num_accepted
        req.draft_token_ids.clear()
        for tok in drafts[:num_accepted] + [bonus]:
            req.output_token_ids.append(tok)
            if len(req.output_token_ids) >= req.sampling_params.max_tokens:
                self.scheduler.remove(req)
                return


PrefixCacheMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPrefixCacheMachine = PrefixCacheMachine.TestCase
