"""Compile in long-lived worker processes, each capped in memory and killed past a limit.

A pathological grammar or schema can allocate gigabytes or hold the GIL for seconds, so
the engine process never builds tables itself: compiles run in up to ``max_workers``
worker processes started from a ``forkserver`` (never a plain fork of the engine, whose
torch/OpenMP and server threads make fork unsafe). The forkserver preloads the compile
modules; a worker then serves compile after compile, keeping what compiles share
(terminal DFAs, grammar lines, vocabulary walks) and the vocabulary it was sent once, so
a compile costs what it costs in a warm process plus one round trip.

Each job caps the worker's address space at its size then plus ``memory_bytes``
(``RLIMIT_AS``). A job past ``timeout_s`` kills its worker; so does a memory error or a
crash. A worker whose resident memory has grown by ``memory_bytes`` / 4 is retired
after its job. A replacement starts in the background, so the next compile finds one.

Settings: ``SPECDEC_COMPILE_ISOLATION`` (``0`` compiles in-process), ``SPECDEC_COMPILE_
WORKERS`` (default 2), ``SPECDEC_COMPILE_MEMORY_MIB`` (default 2048).
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import pickle
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from multiprocessing import spawn
from typing import Any

from specdec.structured.errors import CompileTimeoutError, ConstraintError

ISOLATION = os.environ.get("SPECDEC_COMPILE_ISOLATION", "1") != "0"
MAX_WORKERS = int(os.environ.get("SPECDEC_COMPILE_WORKERS", "2"))
MEMORY_BYTES = int(os.environ.get("SPECDEC_COMPILE_MEMORY_MIB", "2048")) * 2**20
PRELOAD = ["specdec.structured.compile_preload"]  # imports the compile modules, warm
KEPT_VOCABULARIES = 2  # per worker, least recently used dropped (both sides agree)


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
    """Start a child that does not re-import the caller's ``__main__``: ``_serve`` lives
    in this module, and a user's script without an ``if __name__ == "__main__"`` guard
    would otherwise run again in every compile worker (and fail to start it)."""
    _starting.active = True
    try:
        yield
    finally:
        _starting.active = False


def _is_vocabulary(obj: Any) -> bool:
    from specdec.structured.vocabulary import TokenVocabulary

    return isinstance(obj, TokenVocabulary)


class _KeptVocabularies:
    """The vocabularies a worker holds, by fingerprint: the parent's copy of the list
    decides what it sends in full, the worker's copy what it can resolve; both see the
    same jobs in the same order, so they stay equal."""

    def __init__(self) -> None:
        self.items: OrderedDict[str, Any] = OrderedDict()

    def use(self, vocab: Any) -> None:
        self.items[vocab.fingerprint] = vocab
        self.items.move_to_end(vocab.fingerprint)
        while len(self.items) > KEPT_VOCABULARIES:
            self.items.popitem(last=False)


class _JobPickler(pickle.Pickler):
    """Pickles a job, a vocabulary the worker holds as its fingerprint only (~3 MB and
    ~3 ms saved each compile)."""

    def __init__(self, file, kept: _KeptVocabularies):
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self.kept = kept

    def persistent_id(self, obj: Any) -> str | None:
        if _is_vocabulary(obj) and obj.fingerprint in self.kept.items:
            return obj.fingerprint
        return None


class _JobUnpickler(pickle.Unpickler):
    def __init__(self, file, kept: _KeptVocabularies):
        super().__init__(file)
        self.kept = kept

    def persistent_load(self, pid: str) -> Any:
        return self.kept.items[pid]


def _pickle_job(fn: Callable, args: tuple, kept: _KeptVocabularies) -> bytes:
    out = io.BytesIO()
    _JobPickler(out, kept).dump((fn, args))
    for arg in args:
        if _is_vocabulary(arg):
            kept.use(arg)
    return out.getvalue()


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, ctx, memory_bytes: int):
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_serve, args=(child_conn, memory_bytes),
                                   daemon=True, name="specdec-compile")
        with _without_main_module():
            self.process.start()
        child_conn.close()
        self.kept = _KeptVocabularies()
        self.started_bytes = self.resident_bytes()

    def resident_bytes(self) -> int:
        try:
            with open(f"/proc/{self.process.pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            return 0

    def grown(self, limit: int) -> bool:
        """Whether its resident memory has grown by more than ``limit`` since its start."""
        return self.resident_bytes() - self.started_bytes > limit

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
        self.conn.close()


class ProcessCompiler:
    """Runs ``fn(*args, send)`` in a capped worker; ``on_progress`` sees what it sends."""

    def __init__(self, max_workers: int = MAX_WORKERS, memory_bytes: int = MEMORY_BYTES):
        self.max_workers = max_workers
        self.memory_bytes = memory_bytes
        self._slots = threading.BoundedSemaphore(max_workers)
        self._idle: list[_Worker] = []
        self._idle_lock = threading.Lock()
        self._ctx: Any = None
        self._ctx_lock = threading.Lock()
        self.ready = threading.Event()  # set once a worker has answered (preload done)

    def start(self) -> None:
        """Start the forkserver and the workers now, not on the first compile: the
        preload takes ~2 s, which a first compile would wait out (and a bad grammar would
        be found only after the request's validation wait). Returns at once; ``ready``
        is set when a first worker has answered."""
        from multiprocessing import forkserver

        self._context()
        forkserver.ensure_running()
        threading.Thread(target=self._start_workers, daemon=True,
                         name="compile-warm").start()

    def _start_workers(self) -> None:
        with contextlib.suppress(Exception):  # a real compile reports a real failure
            # Outside the compile slots: a compile never waits for (or times out on) it.
            first = _Worker(self._context(), self.memory_bytes)
            try:
                self._exchange(first, _nothing, (), "a first compile worker", 60.0,
                               time.monotonic() + 60.0, None)
            except Exception:
                first.stop()
                raise
            self._put_idle(first)
        self.ready.set()
        for _ in range(self.max_workers - 1):
            self._replenish()

    def shutdown(self) -> None:
        """Stop the idle workers (busy ones stop when their job ends and finds no one)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()

    def _context(self):
        with self._ctx_lock:
            if self._ctx is None:
                ctx = mp.get_context("forkserver")
                ctx.set_forkserver_preload(PRELOAD)
                self._ctx = ctx
            return self._ctx

    def run(self, fn: Callable, args: tuple, what: str, timeout_s: float | None,
            on_progress: Callable[[Any], None] | None = None) -> Any:
        """``fn(*args, send)``'s result; ``send(msg)`` in the worker reaches ``on_progress``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if not self._slots.acquire(timeout=timeout_s):  # the wait counts toward the limit
            raise CompileTimeoutError(f"grammar too complex: {what} waited {timeout_s} s "
                                      "for a compile worker")
        try:
            worker = self._take_idle() or _Worker(self._context(), self.memory_bytes)
            return self._exchange(worker, fn, args, what, timeout_s, deadline, on_progress,
                                  keep=True)
        finally:
            self._slots.release()

    def _take_idle(self) -> _Worker | None:
        with self._idle_lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    return worker
                worker.stop()
        return None

    def _put_idle(self, worker: _Worker) -> None:
        with self._idle_lock:
            if len(self._idle) < self.max_workers:
                self._idle.append(worker)
                return
        worker.stop()

    def _replenish(self) -> None:
        """Start a worker for the idle list, in this thread (call it from a background
        one): the next compile then finds a worker past its start-up."""
        with self._idle_lock:
            if len(self._idle) >= self.max_workers:
                return
        with contextlib.suppress(Exception):
            self._put_idle(_Worker(self._context(), self.memory_bytes))

    def _replace_in_background(self) -> None:
        threading.Thread(target=self._replenish, daemon=True, name="compile-respawn").start()

    def _exchange(self, worker: _Worker, fn, args, what, timeout_s, deadline, on_progress,
                  keep: bool = False) -> Any:
        healthy = False
        try:
            worker.conn.send_bytes(_pickle_job(fn, args, worker.kept))
            kind, payload = self._collect(worker, what, timeout_s, deadline, on_progress)
            healthy = kind in ("done", "error")  # a refused grammar leaves it as it was
            if kind == "done":
                return payload
            if kind == "error":
                raise pickle.loads(payload)
            raise ConstraintError(f"grammar too complex: compiling {what} exceeded the "
                                  f"memory limit ({self.memory_bytes >> 20} MiB)")
        except (BrokenPipeError, ConnectionResetError, EOFError):
            raise self._died(worker, what) from None
        finally:
            if keep and healthy and not worker.grown(self.memory_bytes // 4):
                self._put_idle(worker)
            elif keep:
                worker.stop()
                self._replace_in_background()

    def _died(self, worker: _Worker, what: str) -> ConstraintError:
        worker.process.join(5)
        return ConstraintError(f"compiling {what} exceeded the memory limit "
                               f"({self.memory_bytes >> 20} MiB) or crashed "
                               f"(exit {worker.process.exitcode})")

    def _collect(self, worker: _Worker, what, timeout_s, deadline,
                 on_progress) -> tuple[str, Any]:
        """The job's last message, (kind, payload); progress goes to ``on_progress``."""
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not worker.conn.poll(left):
                raise CompileTimeoutError(f"grammar too complex: compiling {what} took "
                                          f"longer than {timeout_s} s")
            kind, payload = worker.conn.recv()  # EOFError: killed by the kernel or allocator
            if kind != "progress":
                return kind, payload
            if on_progress is not None:
                on_progress(payload)


def _nothing(send) -> None:
    return None


def _serve(conn, memory_bytes: int) -> None:
    """The worker's loop: a job in, its result (or error) out, until the parent is gone.
    A memory error ends the worker: what it held may be half-built."""
    kept = _KeptVocabularies()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        while True:
            try:
                job = conn.recv_bytes()
            except (EOFError, OSError):
                return  # the parent closed its end or exited
            if not _run_job(conn, job, kept, memory_bytes, hard):
                return
    except (BrokenPipeError, ConnectionResetError):
        pass  # the parent is gone (it exited, or killed the compile): nobody to tell
    finally:
        conn.close()


def _run_job(conn, job: bytes, kept: _KeptVocabularies, memory_bytes: int, hard: int) -> bool:
    """Runs one job under the cap; False when the worker must exit."""
    cap = _address_space() + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY
                                            else min(cap, hard), hard))
    try:
        fn, args = _JobUnpickler(io.BytesIO(job), kept).load()
        for arg in args:
            if _is_vocabulary(arg):
                kept.use(arg)
        result = fn(*args, lambda msg: conn.send(("progress", msg)))
        conn.send(("done", result))
        return True
    except (BrokenPipeError, ConnectionResetError):
        raise
    except MemoryError:
        _send_quietly(conn, ("memory", None))
        return False
    except BaseException as exc:  # noqa: BLE001 - hand every error to the parent
        if not isinstance(exc, ConstraintError):
            exc = ConstraintError(f"{type(exc).__name__}: {exc}")
        _send_quietly(conn, ("error", pickle.dumps(exc)))
        return True
    finally:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


def _send_quietly(conn, message: tuple) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        conn.send(message)


def _address_space() -> int:
    """This process's virtual memory size in bytes (what RLIMIT_AS counts)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
