"""Scheduler.update: the one place a step's computed tokens and rejected drafts land."""

from __future__ import annotations

from specdec.core.messages import RequestSample, SampleOutput
from tests.helpers import make_request, make_scheduler


def test_update_advances_every_scheduled_request():
    sched = make_scheduler(64, max_num_batched_tokens=8)
    long, short = make_request(20), make_request(3)
    sched.add(long)
    sched.add(short)
    out = sched.schedule()  # long: a chunk of 8 (no sample); short: not admitted yet
    assert [s.num_tokens for s in out.scheduled] == [8]
    sched.update(out, SampleOutput())
    assert long.num_computed_tokens == 8 and short.num_computed_tokens == 0


def test_update_rolls_back_rejected_drafts_and_frees_their_blocks():
    sched = make_scheduler(16, block_size=4, max_num_batched_tokens=64)
    req = make_request(6, max_tokens=20)
    sched.add(req)
    sched.update(sched.schedule(), SampleOutput())  # 6 computed
    req.output_token_ids.append(9)  # 7 tokens, 2 blocks
    req.draft_token_ids = [1, 2, 3, 4, 5, 6]
    out = sched.schedule()  # 7 + 6 drafts = 13 tokens -> 4 blocks
    assert out.scheduled[0].num_tokens == 7 and len(sched.kv.block_ids(req.request_id)) == 4
    sched.update(out, SampleOutput([RequestSample(req, [1, 7], 1, [])]))
    assert req.num_computed_tokens == 8  # 7 + the one accepted draft
    assert req.draft_token_ids == [] and req.draft_probs is None
    assert len(sched.kv.block_ids(req.request_id)) == 3  # room for token 9 only
    assert sched.kv.num_free_blocks == 13


def test_update_with_all_drafts_accepted_keeps_every_block():
    sched = make_scheduler(16, block_size=4, max_num_batched_tokens=64)
    req = make_request(7, max_tokens=20)
    sched.add(req)
    sched.update(sched.schedule(), SampleOutput())
    req.output_token_ids.append(9)
    req.draft_token_ids = [1, 2, 3]
    out = sched.schedule()  # positions 7..10: 11 tokens, 3 blocks
    sched.update(out, SampleOutput([RequestSample(req, [1, 2, 3, 4], 3, [])]))
    assert req.num_computed_tokens == 11
    assert len(sched.kv.block_ids(req.request_id)) == 3


def test_rewind_only_moves_back_and_keeps_blocks():
    sched = make_scheduler(16, block_size=4)
    req = make_request(10)
    sched.add(req)
    sched.update(sched.schedule(), SampleOutput())
    blocks = sched.kv.block_ids(req.request_id)
    sched.rewind(req, 4)
    assert req.num_computed_tokens == 4 and sched.kv.block_ids(req.request_id) == blocks
    sched.rewind(req, 9)
    assert req.num_computed_tokens == 4
