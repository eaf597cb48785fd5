"""Compile in a child process with a memory cap and a wall-clock limit.

A pathological grammar or schema can allocate gigabytes or hold the GIL for seconds, so
the engine process never builds tables itself: each compile gets its own child (at most
``max_workers`` at a time) from a ``forkserver`` (never a plain fork of the engine, whose
torch/OpenMP and server threads make fork unsafe). The forkserver preloads the compile
modules, so a child starts in milliseconds. The child caps its address space at its
baseline plus ``memory_bytes`` (``RLIMIT_AS``), builds the artifacts the disk cache
stores and sends them back pickled; past ``timeout_s`` it is killed.

Settings: ``SPECDEC_COMPILE_ISOLATION`` (``0`` compiles in-process), ``SPECDEC_COMPILE_
WORKERS`` (default 2), ``SPECDEC_COMPILE_MEMORY_MIB`` (default 2048).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import resource
import threading
import time
from collections.abc import Callable
from multiprocessing import spawn
from typing import Any

from specdec.structured.errors import CompileTimeoutError, ConstraintError

ISOLATION = os.environ.get("SPECDEC_COMPILE_ISOLATION", "1") != "0"
MAX_WORKERS = int(os.environ.get("SPECDEC_COMPILE_WORKERS", "2"))
MEMORY_BYTES = int(os.environ.get("SPECDEC_COMPILE_MEMORY_MIB", "2048")) * 2**20
PRELOAD = ["specdec.structured.compile_preload"]  # imports the compile modules, warm


_starting = threading.local()


def _preparation_data(name: str, _original=spawn.get_preparation_data) -> dict:
    data = _original(name)
    if getattr(_starting, "active", False):
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


spawn.get_preparation_data = _preparation_data


@contextlib.contextmanager
def _without_main_module():
    """Start a child that does not re-import the caller's ``__main__``: ``_child`` lives
    in this module, and a user's script without an ``if __name__ == "__main__"`` guard
    would otherwise run again in every compile child (and fail to start it)."""
    _starting.active = True
    try:
        yield
    finally:
        _starting.active = False


class ProcessCompiler:
    """Runs ``fn(*args)`` in a fresh capped child; ``on_progress`` sees its messages."""

    def __init__(self, max_workers: int = MAX_WORKERS, memory_bytes: int = MEMORY_BYTES):
        self.max_workers = max_workers
        self.memory_bytes = memory_bytes
        self._slots = threading.BoundedSemaphore(max_workers)
        self._ctx: Any = None
        self._ctx_lock = threading.Lock()
        self.ready = threading.Event()  # set once a child has started (the server preloaded)

    def start(self) -> None:
        """Start the forkserver now, not on the first compile: its preload takes ~2 s,
        which a first compile would wait out (and a bad grammar would be found only
        after the request's validation wait). Returns at once; ``ready`` is set when a
        first, empty child has run."""
        from multiprocessing import forkserver

        self._context()
        forkserver.ensure_running()
        threading.Thread(target=self._first_child, daemon=True,
                         name="compile-warm").start()

    def _first_child(self) -> None:
        with contextlib.suppress(Exception):  # a real compile reports a real failure
            # Outside the compile slots: a compile never waits for (or times out on) it.
            self._in_child(_nothing, (), "a first compile child", 60.0,
                           time.monotonic() + 60.0, None)
        self.ready.set()

    def _context(self):
        with self._ctx_lock:
            if self._ctx is None:
                ctx = mp.get_context("forkserver")
                ctx.set_forkserver_preload(PRELOAD)
                self._ctx = ctx
            return self._ctx

    def run(self, fn: Callable, args: tuple, what: str, timeout_s: float | None,
            on_progress: Callable[[Any], None] | None = None) -> Any:
        """``fn(*args, send)``'s result; ``send(msg)`` in the child reaches ``on_progress``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if not self._slots.acquire(timeout=timeout_s):  # the wait counts toward the limit
            raise CompileTimeoutError(f"grammar too complex: {what} waited {timeout_s} s "
                                      "for a compile worker")
        try:
            return self._in_child(fn, args, what, timeout_s, deadline, on_progress)
        finally:
            self._slots.release()

    def _in_child(self, fn, args, what, timeout_s, deadline, on_progress) -> Any:
        ctx = self._context()
        recv, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_child, args=(send, self.memory_bytes, fn, args),
                            daemon=True, name="specdec-compile")
        with _without_main_module():
            child.start()
        send.close()
        try:
            return self._collect(recv, child, what, timeout_s, deadline, on_progress)
        finally:
            if child.is_alive():
                child.kill()
            child.join()
            recv.close()

    def _collect(self, recv, child, what, timeout_s, deadline, on_progress) -> Any:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not recv.poll(left):
                raise CompileTimeoutError(f"grammar too complex: compiling {what} took "
                                          f"longer than {timeout_s} s")
            try:
                kind, payload = recv.recv()
            except EOFError:  # died without a word: the kernel or the allocator killed it
                child.join()
                raise ConstraintError(f"compiling {what} exceeded the memory limit "
                                      f"({self.memory_bytes >> 20} MiB) or crashed "
                                      f"(exit {child.exitcode})") from None
            if kind == "progress":
                if on_progress is not None:
                    on_progress(payload)
            elif kind == "memory":
                raise ConstraintError(f"grammar too complex: compiling {what} exceeded the "
                                      f"memory limit ({self.memory_bytes >> 20} MiB)")
            elif kind == "error":
                raise pickle.loads(payload)
            else:
                return payload


def _nothing(send) -> None:
    return None


def _child(conn, memory_bytes: int, fn: Callable, args: tuple) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + memory_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        result = fn(*args, lambda msg: conn.send(("progress", msg)))
        conn.send(("done", result))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the parent is gone (it exited, or killed the compile): nobody to tell
    except MemoryError:
        _send_quietly(conn, ("memory", None))
    except BaseException as exc:  # noqa: BLE001 - hand every error to the parent
        if not isinstance(exc, ConstraintError):
            exc = ConstraintError(f"{type(exc).__name__}: {exc}")
        _send_quietly(conn, ("error", pickle.dumps(exc)))
    finally:
        conn.close()


def _send_quietly(conn, message: tuple) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        conn.send(message)


def _address_space() -> int:
    """This process's virtual memory size in bytes (what RLIMIT_AS counts)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
