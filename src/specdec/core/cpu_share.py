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

import os
import statistics
import time
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

    @staticmethod
    def _sample_others() -> int | None:
        """Runnable tasks on the machine that are not this process's threads."""
        try:
            running = int(LOADAVG.read_text().split()[3].split("/")[0])
            own = 0
            for task in os.scandir(TASKS):
                try:
                    with open(os.path.join(task.path, "stat"), "rb") as f:
                        stat = f.read()
                except OSError:  # the thread ended meanwhile
                    continue
                own += stat[stat.rindex(b")") + 2: stat.rindex(b")") + 3] == b"R"
        except (OSError, ValueError, IndexError):
            return None
        return max(0, running - own)
