"""One request's outputs on their way to its HTTP response: a small buffer of deltas.

The engine's outputs are cumulative (all text, token ids and logprobs so far); a
buffer of those would grow quadratically for a reader that falls behind. The stream
keeps each step's part only, and tells its owner when it is full (pause the request)
and when the reader has drained it (resume).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from specdec.outputs import RequestOutput


@dataclass
class RequestStream:
    """What one request receives: its outputs as deltas, in order, ending with a finished
    one. ``text``, ``token_ids`` and ``logprobs`` of each output hold that step's part
    only (``logprobs`` aligned with ``delta_token_ids``)."""

    request_id: str
    num_prompt_tokens: int
    capacity: int = 16  # undelivered outputs at which the request is paused
    num_generated: int = 0  # tokens handed to the reader so far
    pending: collections.deque[RequestOutput] = field(default_factory=collections.deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    finished: bool = False
    paused: bool = False
    on_drained: Callable[[RequestStream], None] | None = None  # resume a paused request
    stall_timer: asyncio.TimerHandle | None = None

    def push(self, out: RequestOutput) -> bool:
        """Queue ``out`` as a delta; True when the buffer is full (pause the request)."""
        n = len(out.delta_token_ids)
        logprobs = None if out.logprobs is None else out.logprobs[max(0, len(out.logprobs) - n):]
        self.pending.append(dataclasses.replace(out, text=out.delta_text,
                                                token_ids=list(out.delta_token_ids),
                                                logprobs=logprobs))
        self.ready.set()
        return len(self.pending) >= self.capacity

    async def __aiter__(self) -> AsyncIterator[RequestOutput]:
        while not self.finished:
            while not self.pending:
                self.ready.clear()
                await self.ready.wait()
            out = self.pending.popleft()
            self.finished = out.finished
            self.num_generated += len(out.token_ids)
            if self.paused and len(self.pending) <= self.capacity // 2 and self.on_drained:
                self.on_drained(self)
            yield out
