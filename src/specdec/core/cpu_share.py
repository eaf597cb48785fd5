"""How many threads the next step may use: the cores other tasks leave free.

A step's kernels split each projection across torch's threads, which meet at a barrier
after every one (~150 per decode token). When another task wants a core, one of the
engine's threads is descheduled and the rest spin at the barrier until it runs again:
measured on 2 cores beside two busy processes, a decode token took 30-550 ms with 2
threads and 6-14 ms with 1 (6 ms with 2 on a quiet machine). So before each step the
engine counts the runnable tasks that are not its own (``/proc/loadavg``'s running
count less this process's running threads, the median of the last few samples) and
runs the step on ``max(1, min(threads, cores - others))`` threads.

Linux only (elsewhere the configured threads always run). ``SPECDEC_ADAPTIVE_THREADS=0``
or ``EngineConfig.adaptive_threads=False`` turns it off. Outputs do not change with the
thread count on the GGUF and batch-invariant kernels (tested); oneDNN's dense paths
make no such promise, as they make none across batch sizes.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
import weakref
from collections import deque
from pathlib import Path

LOADAVG = Path("/proc/loadavg")
TASKS = Path("/proc/self/task")
SAMPLE_INTERVAL_S = 0.05
WINDOW = 5  # samples in the median: a task running for one sample does not count


def adaptive_by_env() -> bool:
    return os.environ.get("SPECDEC_ADAPTIVE_THREADS", "1").lower() not in ("0", "false", "no")


class CpuShare:
    """``threads()``: the thread count for the next step (sampled at most every
    ``interval_s``; between samples the last answer)."""

    def __init__(self, threads: int, cores: int | None = None,
                 interval_s: float = SAMPLE_INTERVAL_S, enabled: bool = True):
        self.max_threads = max(1, threads)
        self.cores = cores or os.cpu_count() or 1
        self.interval_s = interval_s
        self.enabled = enabled and LOADAVG.exists() and TASKS.exists()
        self._others: deque[int] = deque(maxlen=WINDOW)
        self._next_sample = 0.0
        self._threads = self.max_threads

    def threads(self) -> int:
        if not self.enabled:
            return self.max_threads
        now = time.monotonic()
        if now >= self._next_sample:
            self._next_sample = now + self.interval_s
            others = self._sample_others()
            if others is not None:
                self._others.append(others)
                busy = int(statistics.median_low(self._others))
                self._threads = max(1, min(self.max_threads, self.cores - busy))
        return self._threads

    def _sample_others(self) -> int | None:
        """Runnable tasks on the machine that are not this process's threads."""
        try:
            running = int(os.pread(self._proc.loadavg, 128, 0).split()[3].split(b"/")[0])
            others = running - self._proc.own_running()
            if others > 0:  # a thread started since the last listing would count here
                self._proc.list_threads()
                others = running - self._proc.own_running()
        except (OSError, ValueError, IndexError):
            return None
        return max(0, others)

    @functools.cached_property
    def _proc(self) -> ProcFiles:
        return ProcFiles()


class ProcFiles:
    """``/proc/loadavg`` and this process's threads' ``stat`` files, held open: a
    ``pread`` of an open file costs ~5 µs, an open, read and close ~25 (a sample read
    ~10 of them). The threads are listed again when one has ended, or on request."""

    def __init__(self):
        self.loadavg = os.open(LOADAVG, os.O_RDONLY)
        self.threads: dict[str, int] = {}  # thread id -> its stat file
        weakref.finalize(self, ProcFiles._close, self.threads, self.loadavg)
        self.list_threads()

    def list_threads(self) -> None:
        listed = set(os.listdir(TASKS))
        for tid in set(self.threads) - listed:
            os.close(self.threads.pop(tid))
        for tid in listed - set(self.threads):
            try:
                self.threads[tid] = os.open(TASKS / tid / "stat", os.O_RDONLY)
            except OSError:  # the thread ended meanwhile
                pass

    def own_running(self) -> int:
        """This process's threads in state R (running or runnable)."""
        running, ended = 0, False
        for fd in self.threads.values():
            try:
                stat = os.pread(fd, 512, 0)
            except OSError:  # the thread ended (ESRCH)
                ended = True
                continue
            close = stat.rfind(b")")
            running += stat[close + 2: close + 3] == b"R"
        if ended:
            self.list_threads()
        return running

    @staticmethod
    def _close(threads: dict[str, int], loadavg: int) -> None:
        for fd in [*threads.values(), loadavg]:
            os.close(fd)
