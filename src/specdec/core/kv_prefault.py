"""The KV cache's pages faulted in on a thread of their own, in idle time.

The fused kernels' caches (``huge_page_zeros``) get their memory on first write, and a
fresh block is first written by a decode step: the thread writing the step's K/V rows
then clears 2 MB pages (in a virtual machine, also waits for the host to back them)
while the rest of the team waits at the next barrier. Measured on AMD EPYC (Zen 5, a
KVM guest), 64 requests decoding together: that thread's RoPE-and-write loop took ~140
µs a layer against ~10 with the pages in, and the step ~13 % longer.

So the pool's pages are faulted in from the start, block 0 first (the order in which
the pool hands out never-used blocks, ``block_pool.py``), on a thread that runs only on
a core nothing else wants (``SCHED_IDLE``: a step's threads, which meet at barriers,
are never descheduled for it). It mostly runs while the engine starts or waits for
work; where a step reaches a block before it, the step faults the pages in itself, as
without it. Contents never change (``MADV_POPULATE_WRITE``, ``populate_pages.h``), so
it runs beside the steps writing the same blocks. Like the eager path's zero-filled
caches and llama.cpp's cleared one, the whole pool ends up resident.

``SPECDEC_KV_PREFAULT=0`` turns it off.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref

import torch

CHUNK_BYTES = 8 << 20  # of pool (all layers) per round of populate calls
ENV = "SPECDEC_KV_PREFAULT"


def enabled_by_env() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class KvPrefault:
    """Faults in the pages of ``caches`` (each ``[2, slots, heads, dim]``: K then V, a
    block the same share of each) block by block, on a background thread."""

    def __init__(self, kernels, caches: list[torch.Tensor], num_blocks: int):
        self.num_blocks = num_blocks
        self._progress = _Progress()
        regions = []  # (tensor, byte offset of block 0, bytes per block): K and V halves
        for cache in caches:
            half = cache.nbytes // 2
            regions += [(cache, 0, half // num_blocks), (cache, half, half // num_blocks)]
        per_block = sum(per for _, _, per in regions)
        chunk = max(1, CHUNK_BYTES // max(per_block, 1))
        # The thread holds the caches until it ends: at the last block, or once this
        # object (the runner's) is gone.
        weakref.finalize(self, self._progress.stop)
        worker = threading.Thread(target=_populate, args=(kernels, regions, num_blocks,
                                                          chunk, self._progress),
                                  name="specdec-kv-prefault", daemon=True)
        _workers[worker] = self._progress
        worker.start()

    @property
    def done(self) -> int:
        """Blocks 0 .. done have their pages in (or the OS could not populate them:
        ``supported``)."""
        return self._progress.done

    @property
    def supported(self) -> bool:
        return self._progress.supported

    def wait(self, timeout_s: float) -> bool:
        """True once every block's pages are in, or the worker has stopped (benchmarks
        start measuring there); False after ``timeout_s``."""
        with self._progress.cond:
            return self._progress.cond.wait_for(
                lambda: self._progress.done >= self.num_blocks or self._progress.stopped,
                timeout_s)


class _Progress:
    """What the owner and the worker share (the worker holds this, not the owner)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.done = 0
        self.stopped = False
        self.supported = True

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()


# Live workers, stopped and joined at exit: a daemon thread inside a populate call (the
# GIL released) when the interpreter finalizes would abort the process on its return.
_workers: weakref.WeakKeyDictionary[threading.Thread, _Progress] = weakref.WeakKeyDictionary()


@atexit.register
def _stop_workers() -> None:
    for worker, progress in list(_workers.items()):
        progress.stop()
        worker.join(timeout=10.0)


def _idle_priority() -> None:
    """This thread runs only on a core nothing else wants (Linux: SCHED_IDLE; else the
    lowest priority it may take)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass


def _populate(kernels, regions, num_blocks: int, chunk: int, progress: _Progress) -> None:
    _idle_priority()
    for lo in range(0, num_blocks, chunk):
        if progress.stopped:
            break
        hi = min(num_blocks, lo + chunk)
        for tensor, base, per_block in regions:
            if not kernels.populate_pages(tensor, base + lo * per_block, (hi - lo) * per_block):
                progress.supported = False  # the OS cannot: steps fault pages in
                hi = num_blocks
                break
        with progress.cond:
            progress.done = hi
            progress.cond.notify_all()
        if hi == num_blocks:
            break
    regions.clear()
