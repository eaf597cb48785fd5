"""Continuous-batching scheduler: waiting and running queues, one catch-up rule.

Every request has ``num_computed_tokens``; each step gives it up to
``num_tokens_with_drafts - num_computed_tokens`` new tokens within the step's
token budget. A new prompt, a chunk of a long prompt, a decode token, a
recomputation after preemption and k draft tokens + 1 are all the same thing.
Running requests are served first (oldest first); waiting requests are admitted
with what is left. When the pool runs dry, the newest running request is
preempted: its blocks are freed and it returns to the head of the waiting queue
to be recomputed later. A paused request (its reader is not keeping up) keeps its
place and its blocks but is not scheduled until it is resumed.

The scheduler owns ``num_computed_tokens``: admission sets it (prefix-cache hits),
preemption resets it, :meth:`update` advances it after each forward and takes back
the drafts sampling rejected (freeing their KV), :meth:`rewind` moves it back.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from specdec.core.kv_cache_manager import KVCacheManager
from specdec.core.messages import SampleOutput, ScheduledRequest, SchedulerOutput
from specdec.core.request import Request, RequestStatus


@dataclass
class SchedulerConfig:
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 64
    long_prefill_token_threshold: int | None = None

    def __post_init__(self) -> None:
        if self.max_num_batched_tokens < 1:
            raise ValueError("max_num_batched_tokens must be >= 1")
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if self.long_prefill_token_threshold is not None and self.long_prefill_token_threshold < 1:
            raise ValueError("long_prefill_token_threshold must be >= 1 when set")


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv: KVCacheManager):
        self.config = config
        self.kv = kv
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.paused: set[str] = set()  # request ids not to schedule until resumed
        self.num_preemptions = 0

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def has_unpaused(self) -> bool:
        """Some unfinished request can be scheduled (is not paused)."""
        return len(self.waiting) + len(self.running) > len(self.paused)

    def pause(self, request_id: str) -> None:
        self.paused.add(request_id)

    def resume(self, request_id: str) -> None:
        self.paused.discard(request_id)

    def decoding_requests(self) -> list[Request]:
        """Running requests whose next step is a decode (candidates for drafts)."""
        return [r for r in self.running if r.num_computed_tokens >= r.num_tokens - 1
                and r.request_id not in self.paused]

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        scheduled: dict[str, ScheduledRequest] = {}

        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            if req.request_id in self.paused:
                i += 1
                continue
            num_new = self._num_new_tokens(req, budget)
            blocks = self.kv.allocate_slots(req, num_new)
            while blocks is None:
                victim = self.running[-1]
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is req:
                    break
                blocks = self.kv.allocate_slots(req, num_new)
            if blocks is None:
                break
            scheduled[req.request_id] = self._scheduled(req, num_new)
            budget -= num_new
            i += 1

        if not out.preempted:
            self._admit_waiting(budget, scheduled)
        out.scheduled = list(scheduled.values())
        return out

    def _admit_waiting(self, budget: int, scheduled: dict[str, ScheduledRequest]) -> None:
        skipped: list[Request] = []
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            req = self.waiting.popleft()
            if req.blocked_reason or req.request_id in self.paused:
                skipped.append(req)
                continue
            cached = self.kv.get_computed_blocks(req)
            num_cached = len(cached) * self.kv.block_size
            num_new = min(self._num_new_tokens(req, budget, num_cached), budget)
            if self.kv.allocate_slots(req, num_new, cached) is None:
                self.waiting.appendleft(req)
                break
            req.num_computed_tokens = num_cached
            if req.num_preemptions == 0:
                req.num_cached_prompt_tokens = num_cached
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            scheduled[req.request_id] = self._scheduled(req, num_new)
            budget -= num_new
        self.waiting.extendleft(reversed(skipped))

    def _num_new_tokens(self, req: Request, budget: int, num_cached: int = 0) -> int:
        num_new = req.num_tokens_with_drafts - req.num_computed_tokens - num_cached
        threshold = self.config.long_prefill_token_threshold
        if threshold is not None:
            num_new = min(num_new, threshold)
        return max(1, min(num_new, budget))

    def _scheduled(self, req: Request, num_new: int) -> ScheduledRequest:
        # Drafts that did not fit the budget are dropped, never half-verified.
        end = req.num_computed_tokens + num_new
        if end < req.num_tokens_with_drafts:
            del req.draft_token_ids[max(0, end - req.num_tokens) :]
        num_drafts = max(0, end - req.num_tokens)
        return ScheduledRequest(req, num_new, num_drafts, self.kv.block_ids(req.request_id))

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.clear_drafts()
        req.status = RequestStatus.WAITING
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)

    def update(self, scheduler_output: SchedulerOutput, sample_output: SampleOutput) -> None:
        """The step ran: each scheduled request computed its tokens; each request that
        sampled keeps the drafts it accepted and frees the KV of those it rejected."""
        for scheduled in scheduler_output.scheduled:
            scheduled.request.num_computed_tokens += scheduled.num_tokens
        for sample in sample_output.samples:
            req = sample.request
            num_rejected = len(req.draft_token_ids) - sample.num_accepted_drafts
            if req.draft_token_ids:
                req.num_computed_tokens -= num_rejected
                self.kv.trim(req, req.num_computed_tokens + 1)  # room for the next token
            req.clear_drafts()

    def rewind(self, req: Request, num_computed_tokens: int) -> None:
        """Forget the KV past the first ``num_computed_tokens`` tokens (they are
        recomputed when next scheduled). The blocks stay with the request."""
        req.num_computed_tokens = min(req.num_computed_tokens, num_computed_tokens)

    def remove(self, req: Request) -> None:
        """Take a finished or aborted request out of the queues and free its blocks."""
        self.paused.discard(req.request_id)
        if req in self.running:
            self.running.remove(req)
        else:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        self.kv.free(req)
