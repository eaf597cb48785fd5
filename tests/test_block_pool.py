"""Block pool and KV cache manager invariants, including a hypothesis state machine."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from specdec.core.block_pool import BlockPool
from tests.helpers import check_pool_invariants, fake_step, make_request, make_scheduler


def test_allocate_free_order_and_double_free():
    pool = BlockPool(4)
    a = pool.allocate(2)
    assert [b.block_id for b in a] == [0, 1]
    pool.free(reversed(a))
    assert [b.block_id for b in pool.free_queue] == [2, 3, 1, 0]
    with pytest.raises(RuntimeError, match="double free"):
        pool.free([a[0]])
    with pytest.raises(RuntimeError, match="asked for 5"):
        pool.allocate(5)


def test_touch_takes_idle_block_out_of_queue():
    pool = BlockPool(3)
    (b,) = pool.allocate(1)
    pool.free([b])
    pool.touch([b])
    assert b.ref_cnt == 1 and b.block_id not in [x.block_id for x in pool.free_queue]


class SchedulerMachine(RuleBasedStateMachine):
    """Random adds, steps and aborts: no block leaked, none owned twice."""

    def __init__(self):
        super().__init__()
        self.sched = make_scheduler(num_blocks=12, block_size=4, max_num_batched_tokens=10,
                                    max_num_seqs=4)
        self.live = []

    @rule(prompt=st.integers(1, 20), max_tokens=st.integers(1, 12))
    def add(self, prompt, max_tokens):
        req = make_request(prompt, max_tokens)
        self.sched.add(req)
        self.live.append(req)

    @precondition(lambda self: self.sched.has_unfinished())
    @rule()
    def step(self):
        for req in fake_step(self.sched):
            self.live.remove(req)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def abort(self, data):
        req = data.draw(st.sampled_from(self.live))
        self.sched.remove(req)
        self.live.remove(req)

    @invariant()
    def pool_consistent(self):
        check_pool_invariants(self.sched)
        queued = list(self.sched.waiting) + self.sched.running
        assert sorted(r.request_id for r in queued) == sorted(r.request_id for r in self.live)

    def teardown(self):
        for _ in range(500):  # everything admitted finishes: no livelock
            if not self.sched.has_unfinished():
                break
            for req in fake_step(self.sched):
                self.live.remove(req)
        assert not self.sched.has_unfinished()
        assert self.sched.kv.num_free_blocks == self.sched.kv.num_blocks


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
