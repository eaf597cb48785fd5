"""Steps run on the cores other tasks leave free (core/cpu_share.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from specdec import LLM, SamplingParams
from specdec.core.cpu_share import CpuShare, ProcFiles


def _share(samples: list[int], threads: int = 4, cores: int = 4) -> tuple[CpuShare, list[int]]:
    share = CpuShare(threads, cores=cores, interval_s=0.0)
    share.enabled = True
    readings = iter(samples)
    share._sample_others = lambda: next(readings)  # type: ignore[method-assign]
    return share, [share.threads() for _ in samples]


def test_threads_follow_the_median_of_other_runnable_tasks():
    # one stray task for one sample does not count; a lasting one does
    _, threads = _share([0, 3, 0, 0, 2, 2, 2, 2, 0, 0, 0])
    assert threads == [4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 4]


def test_never_below_one_thread_nor_above_the_configured_count():
    _, threads = _share([9, 9, 9], threads=2, cores=2)
    assert threads == [1, 1, 1]
    _, threads = _share([0, 0], threads=2, cores=8)
    assert threads == [2, 2]


def test_no_reading_keeps_the_last_answer():
    _, threads = _share([2, 2, 2, None, None], threads=4, cores=4)
    assert threads == [2, 2, 2, 2, 2]


def test_off_means_the_configured_threads(tiny_model_dir):
    llm = LLM(model=str(tiny_model_dir), dtype="float32", load_entry_points=False,
              adaptive_threads=False)
    assert not llm.engine.cpu_share.enabled


@pytest.mark.skipif(not os.path.exists("/proc/loadavg") or (os.cpu_count() or 1) < 2,
                    reason="needs Linux and two cores")
def test_busy_cores_run_the_step_on_fewer_threads_with_the_same_tokens():
    llm = LLM(quantization="gguf", num_threads=2)
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    quiet = llm.generate(["Name three colours:"], params, use_tqdm=False)[0].token_ids
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 2)]
    try:
        time.sleep(0.5)
        before = llm.stats()["steps_on_fewer_threads"]
        contended = llm.generate(["Name three colours:"], params, use_tqdm=False)[0].token_ids
        assert llm.stats()["steps_on_fewer_threads"] > before
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert contended == quiet  # the GGUF kernels do not depend on the thread count


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_proc_files_follow_this_process_threads():
    # Compared with the live list, not a snapshot: other threads of this process (an
    # earlier engine's KV prefault worker) may end while the test runs.
    def live() -> set[str]:
        return set(os.listdir("/proc/self/task"))

    files = ProcFiles()
    assert files.own_running() >= 1  # the thread reading is running
    release = threading.Event()
    waiter = threading.Thread(target=release.wait)
    waiter.start()
    try:
        files.list_threads()
        assert str(waiter.native_id) in files.threads
        assert set(files.threads) == live()
    finally:
        release.set()
        waiter.join()
    files.own_running()  # the ended thread's file fails to read: the list is read again
    assert str(waiter.native_id) not in files.threads
    assert set(files.threads) == live()
