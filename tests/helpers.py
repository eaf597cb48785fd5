"""Engine-free helpers: fake requests and a model-free step for scheduler tests, and a
kernel setting switched for one comparison."""

from __future__ import annotations

import itertools

from specdec.core.kv_cache_manager import KVCacheManager
from specdec.core.request import Request
from specdec.core.scheduler import Scheduler, SchedulerConfig
from specdec.sampling_params import SamplingParams

_ids = itertools.count()


def make_request(num_prompt: int, max_tokens: int = 8, first_token: int = 1) -> Request:
    prompt = [first_token + i for i in range(num_prompt)]
    return Request(f"r{next(_ids)}", None, prompt, SamplingParams(max_tokens=max_tokens))


def make_scheduler(num_blocks: int, block_size: int = 4, **kwargs) -> Scheduler:
    return Scheduler(SchedulerConfig(**kwargs), KVCacheManager(num_blocks, block_size))


def fake_step(sched: Scheduler) -> list[Request]:
    """Schedule one step, pretend the forward ran, append a token where sampled.

    Returns the requests that reached max_tokens (removed from the scheduler)."""
    out = sched.schedule()
    done = []
    for s in out.scheduled:
        sampled = s.samples
        s.request.num_computed_tokens += s.num_tokens
        if sampled:
            s.request.output_token_ids.append(7)
            if len(s.request.output_token_ids) >= s.request.sampling_params.max_tokens:
                sched.remove(s.request)
                done.append(s.request)
    return done


def check_pool_invariants(sched: Scheduler) -> None:
    kv = sched.kv
    owners: dict[int, int] = {}
    for rid, blocks in kv.req_blocks.items():
        ids = [b.block_id for b in blocks]
        assert len(ids) == len(set(ids)), f"{rid} holds a block twice"
        for b in ids:
            owners[b] = owners.get(b, 0) + 1
    free_ids = [b.block_id for b in kv.pool.free_queue]
    assert len(free_ids) == len(set(free_ids)), "a block is queued twice"
    assert len(free_ids) == kv.pool.free_queue.num_free
    for block in kv.pool.blocks:
        assert block.ref_cnt == owners.get(block.block_id, 0), block
        assert (block.ref_cnt == 0) == (block.block_id in set(free_ids)), block
    live = {r.request_id for r in sched.running}
    assert set(kv.req_blocks) <= live, "a request outside the running queue holds blocks"


def without_and_with_nontemporal_weights(kernels, run):
    """``run()`` with the kernels' non-temporal weight hint off, then on; the setting is
    restored afterwards. Returns both results."""
    was = kernels.set_nontemporal_weights(False)
    try:
        assert not kernels.nontemporal_weights()
        plain = run()
        assert kernels.set_nontemporal_weights(True) is False
        assert kernels.nontemporal_weights()
        return plain, run()
    finally:
        kernels.set_nontemporal_weights(was)


def vma_field(address: int, field: str) -> str | None:
    """``field`` of the /proc/self/smaps mapping that holds ``address`` (None: not found)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == field + ":":
                return line.split()[1]
    return None
