"""The engine behind the HTTP server: one thread owns it, asyncio tasks talk to it.

``LLMEngine`` is not thread-safe, so exactly one background thread touches it. The
asyncio side never calls the engine; it sends commands through a queue and waits on
futures::

    event loop (many requests)                  engine thread (one)
    ---------------------------                 -------------------
    await add(prompt, params) --- command --->  engine.add_request  (ValueError -> future)
    async for out in stream   <-- outputs ----  engine.step()  (call_soon_threadsafe)
    abort(request_id)         --- command --->  engine.abort        (KV blocks freed)

The thread steps while any request can be scheduled and sleeps on a condition
variable otherwise; while every request waits on a plugin (a compiling grammar) it
sleeps on ``engine.context.work_ready``, which the plugin and every command set. The
engine never waits for a client, so a slow reader cannot stall the others; and a slow
reader cannot grow memory either:

- each request's :class:`RequestStream` holds deltas only (new text, token ids and
  their logprobs), never the engine's cumulative copies;
- a stream holding ``buffer_outputs`` undelivered outputs is *paused*: the scheduler
  skips the request (it keeps its KV blocks) until the reader drains half the buffer;
- a request paused for ``stall_timeout_s`` is aborted, and its KV blocks freed.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from specdec.engine import LLMEngine
from specdec.outputs import RequestOutput
from specdec.sampling_params import SamplingParams
from specdec.server.request_stream import RequestStream

Command = Callable[[], None]
WAKE_UP_TIMEOUT_S = 0.05  # longest idle wait for a blocked request (a plugin may not signal)


class AsyncEngine:
    """Runs ``engine`` in a background thread; every public method is called from the loop.

    ``on_finished(output)`` (optional) is called on the event loop for every request that
    ends, whatever the reason (metrics use it).
    """

    def __init__(self, engine: LLMEngine,
                 on_finished: Callable[[RequestOutput], None] | None = None,
                 buffer_outputs: int = 16, stall_timeout_s: float = 30.0):
        self.engine = engine
        self.on_finished = on_finished
        self.buffer_outputs = buffer_outputs
        self.stall_timeout_s = stall_timeout_s
        self.num_stalled = 0  # requests aborted because their reader stalled
        self._commands: collections.deque[Command] = collections.deque()
        self._wakeup = threading.Condition()
        self._streams: dict[str, RequestStream] = {}
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.fatal_error: str | None = None

    # ------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="specdec-engine", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float = 5.0) -> None:
        with self._wakeup:
            self._stopping = True
            self._wakeup.notify()
        self.engine.context.work_ready.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def is_healthy(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.fatal_error is None

    @property
    def num_open_streams(self) -> int:
        return len(self._streams)

    # ------------------------------------------------------ loop-side API

    async def add(self, prompt: list[int], params: SamplingParams,
                  prefix: str = "req", fill_max_tokens: bool = False) -> RequestStream:
        """Queue a tokenized prompt; raises the engine's ``ValueError`` if it is refused.

        Prompts are tokenized by the caller (in the prompt workers), never here: the
        engine thread must not spend seconds on a huge prompt while others stream.
        ``fill_max_tokens``: the client gave no ``max_tokens``; allow whatever context the
        prompt leaves.

        The stream is registered before admission, so outputs of the engine's next step
        (which may reach the loop before this coroutine resumes) are never dropped.
        """
        request_id = f"{prefix}-{next(self._ids)}"
        stream = RequestStream(request_id, num_prompt_tokens=0, capacity=self.buffer_outputs,
                               on_drained=self._resume)
        self._streams[request_id] = stream

        def admit() -> int:
            if fill_max_tokens:
                params.max_tokens = self._context_left(prompt)
            return self.engine.add_request(prompt, params, request_id).num_prompt_tokens

        try:
            stream.num_prompt_tokens = await self.call(admit)
        except asyncio.CancelledError:  # the client left while we waited: undo admission
            self.abort(request_id)
            self._streams.pop(request_id, None)
            raise
        except BaseException:
            self._streams.pop(request_id, None)
            raise
        return stream

    def _context_left(self, prompt: list[int]) -> int:
        pool_tokens = self.engine.kv.num_blocks * self.engine.kv.block_size
        return max(1, min(self.engine.max_model_len, pool_tokens) - len(prompt))

    def abort(self, request_id: str) -> None:
        """Stop a request (client gone); its KV blocks return to the pool."""
        if request_id not in self._streams:
            return

        def do_abort() -> None:
            out = self.engine.abort(request_id)
            if out is not None:
                self._deliver([out])

        self._submit(do_abort)

    def _pause(self, stream: RequestStream) -> None:
        """The reader is behind: stop scheduling the request; abort it if it stays so."""
        rid = stream.request_id
        stream.paused = True
        stream.stall_timer = self._loop.call_later(self.stall_timeout_s, self._stalled, stream)

        def pause() -> None:
            if rid in self.engine.requests:
                self.engine.scheduler.pause(rid)

        self._submit(pause)

    def _resume(self, stream: RequestStream) -> None:
        stream.paused = False
        if stream.stall_timer is not None:
            stream.stall_timer.cancel()
        self._submit(lambda: self.engine.scheduler.resume(stream.request_id))

    def _stalled(self, stream: RequestStream) -> None:
        if stream.paused and not stream.finished:
            self.num_stalled += 1
            self.abort(stream.request_id)

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the engine thread and return its result (or raise its exception)."""
        future: Future = Future()

        def command() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                future.set_exception(exc)

        self._submit(command)
        return await asyncio.wrap_future(future)

    async def stats(self) -> dict[str, Any]:
        def stats() -> dict[str, Any]:
            return {**self.engine.stats(), "num_paused": len(self.engine.scheduler.paused),
                    "requests_stalled": self.num_stalled}

        return await self.call(stats)

    def _submit(self, command: Command) -> None:
        if not self.is_healthy:
            raise RuntimeError(f"the engine is not running: {self.fatal_error or 'stopped'}")
        with self._wakeup:
            self._commands.append(command)
            self._wakeup.notify()
        self.engine.context.work_ready.set()  # also ends a wait for blocked requests

    # --------------------------------------------------------- engine thread

    def _run(self) -> None:
        engine = self.engine
        work_ready = engine.context.work_ready
        while True:
            work_ready.clear()  # before taking commands: a later one sets it again
            with self._wakeup:
                while not self._stopping and not self._commands and not self._has_work():
                    self._wakeup.wait()
                if self._stopping:
                    return
                commands = list(self._commands)
                self._commands.clear()
            for command in commands:
                command()
            if not self._has_work():
                continue
            try:
                outputs = engine.step()
            except Exception as exc:  # noqa: BLE001 - fail every request, keep serving
                self._fail_all(f"engine step failed: {type(exc).__name__}: {exc}")
                continue
            if outputs:
                self._deliver(outputs)
            elif self._all_blocked():
                work_ready.wait(WAKE_UP_TIMEOUT_S)  # until a plugin unblocks one, or a command

    def _has_work(self) -> bool:
        """Some request can be stepped (paused ones wait for a resume or abort command)."""
        return self.engine.has_unfinished() and self.engine.scheduler.has_unpaused()

    def _all_blocked(self) -> bool:
        """Every request that could be stepped waits on a plugin (``blocked_reason``)."""
        paused = self.engine.scheduler.paused
        return all(r.blocked_reason for r in self.engine.requests.values()
                   if not r.is_finished and r.request_id not in paused)

    def _fail_all(self, message: str) -> None:
        outputs = []
        for request_id in list(self.engine.requests):
            out = self.engine.abort(request_id)
            if out is not None:
                out.finish_reason, out.error = "error", message
                outputs.append(out)
        self._deliver(outputs)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._dispatch, outputs)

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        """On the event loop: route each output to its request's queue."""
        for out in outputs:
            stream = self._streams.get(out.request_id)
            if stream is None:
                continue
            full = stream.push(out)
            if full and not stream.paused and not out.finished:
                self._pause(stream)
            if out.finished:
                if stream.stall_timer is not None:
                    stream.stall_timer.cancel()
                del self._streams[out.request_id]
                if self.on_finished is not None:
                    self.on_finished(out)

