"""Scheduler behaviour: budget, running first, chunking, admission, preemption."""

from __future__ import annotations

from tests.helpers import fake_step, make_request, make_scheduler


def test_budget_respected_and_prompt_chunked():
    sched = make_scheduler(64, max_num_batched_tokens=8)
    req = make_request(20)
    sched.add(req)
    sizes = []
    while req.num_computed_tokens < 20:
        out = sched.schedule()
        assert out.total_tokens <= 8
        sizes.append(out.scheduled[0].num_tokens)
        assert out.scheduled[0].samples == (req.num_computed_tokens + sizes[-1] >= 20)
        req.num_computed_tokens += sizes[-1]
    assert sizes == [8, 8, 4]


def test_long_prefill_threshold_chunks_below_budget():
    sched = make_scheduler(64, max_num_batched_tokens=100, long_prefill_token_threshold=6)
    req = make_request(14)
    sched.add(req)
    assert sched.schedule().scheduled[0].num_tokens == 6


def test_running_first_then_prefill_mixed_in():
    sched = make_scheduler(64, max_num_batched_tokens=10)
    a = make_request(4, max_tokens=5)
    sched.add(a)
    fake_step(sched)  # a: prefill done, one token out
    b = make_request(30)
    sched.add(b)
    out = sched.schedule()
    assert [s.request for s in out.scheduled] == [a, b]
    assert [s.num_tokens for s in out.scheduled] == [1, 9]  # decode + chunk of b


def test_max_num_seqs_limits_admission():
    sched = make_scheduler(64, max_num_seqs=2)
    reqs = [make_request(3) for _ in range(3)]
    for r in reqs:
        sched.add(r)
    out = sched.schedule()
    assert [s.request for s in out.scheduled] == reqs[:2]
    assert list(sched.waiting) == reqs[2:]


def test_preempts_newest_and_requeues_at_head():
    sched = make_scheduler(4, block_size=4, max_num_batched_tokens=64)
    old, new = make_request(7, max_tokens=20), make_request(7, max_tokens=20)
    sched.add(old)
    sched.add(new)
    fake_step(sched)  # both prefilled (7 tokens): 2 blocks each, pool full
    fake_step(sched)  # decode position 7: still 2 blocks each
    assert sched.num_preemptions == 0
    fake_step(sched)  # position 8 needs a 3rd block: the newest request is preempted
    assert sched.num_preemptions == 1
    assert sched.running == [old] and list(sched.waiting) == [new]
    assert new.num_computed_tokens == 0 and new.output_token_ids  # output kept, recomputed later
    assert sched.kv.block_ids(new.request_id) == []


def test_drafts_scheduled_as_tokens_and_trimmed_to_budget():
    sched = make_scheduler(64, max_num_batched_tokens=3)
    req = make_request(4, max_tokens=20)
    sched.add(req)
    fake_step(sched)  # 4-token prompt in a 3-token budget: chunk
    fake_step(sched)
    req.draft_token_ids = [5, 6, 7, 8]
    out = sched.schedule()
    (s,) = out.scheduled
    assert s.num_tokens == 3 and s.num_draft_tokens == 2 and req.draft_token_ids == [5, 6]
    assert s.samples


def test_trim_frees_blocks_of_rejected_drafts():
    sched = make_scheduler(16, block_size=4, max_num_batched_tokens=64)
    req = make_request(6, max_tokens=20)
    sched.add(req)
    fake_step(sched)  # 6 computed + 1 output: 7 tokens, 2 blocks
    req.draft_token_ids = [1, 2, 3, 4, 5, 6]
    sched.schedule()  # 7 + 6 drafts = 13 tokens -> 4 blocks
    assert len(sched.kv.block_ids(req.request_id)) == 4
    req.num_computed_tokens = 8  # one draft accepted, the rest rejected
    req.clear_drafts()
    sched.kv.trim(req, 9)
    assert len(sched.kv.block_ids(req.request_id)) == 3
    assert sched.kv.num_free_blocks == 13
