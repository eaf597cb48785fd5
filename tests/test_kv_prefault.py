"""The KV cache's pages faulted in on a background thread (``core/kv_prefault.py``,
``kernels/populate_pages.h``): contents never change, every block is reached, the
worker stops with its owner, and an OS that cannot populate leaves the steps to fault
pages in themselves."""

from __future__ import annotations

import gc
import sys

import pytest
import torch

from specdec import LLM, SamplingParams, kernels
from specdec.core import kv_prefault
from specdec.core.kv_prefault import KvPrefault
from tests.helpers import vma_field

K = kernels.load()
pytestmark = pytest.mark.skipif(K is None, reason="fused CPU kernels could not be built")


def rss_kib(t: torch.Tensor) -> int:
    return int(vma_field(t.data_ptr(), "Rss") or 0)


@pytest.mark.skipif(sys.platform != "linux", reason="MADV_POPULATE_WRITE is Linux's")
def test_populate_pages_brings_pages_in_and_keeps_contents():
    t = K.huge_page_zeros([24 << 20], torch.uint8)  # a region of its own
    t[123], t[-1] = 5, 9
    before = rss_kib(t)
    if not K.populate_pages(t, 0, t.nbytes):
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)")
    assert rss_kib(t) >= max(before, 24 << 10)  # every page of the 24 MB is in
    assert (int(t[123]), int(t[-1])) == (5, 9)
    assert int(t.count_nonzero()) == 2
    assert K.populate_pages(t, 7, 0)  # nothing to do
    with pytest.raises(RuntimeError, match="outside the tensor"):
        K.populate_pages(t, 1, t.nbytes)
    with pytest.raises(RuntimeError, match="outside the tensor"):
        K.populate_pages(t, -1, 4)
    with pytest.raises(RuntimeError, match="outside the tensor"):  # no int64 wrap-around
        K.populate_pages(t, 8, (1 << 63) - 4)


def test_every_block_is_reached_and_contents_stay():
    """Caches holding data when the worker passes keep it (a populate that wrote, even
    zeros, would show), and ``done`` reaches the last block."""
    torch.manual_seed(0)
    num_blocks, block_size = 37, 16
    shape = [2, num_blocks * block_size, 3, 64]
    caches = [K.huge_page_zeros(shape, torch.bfloat16) for _ in range(3)]
    for cache in caches:
        cache.copy_(torch.randn(shape))
    expected = [cache.clone() for cache in caches]
    prefault = KvPrefault(K, caches, num_blocks)
    assert prefault.wait(60.0)
    assert prefault.done == num_blocks
    for cache, want in zip(caches, expected, strict=True):
        assert torch.equal(cache, want)


class NoPopulate:
    """Kernels on an OS without MADV_POPULATE_WRITE."""

    calls = 0

    def populate_pages(self, t, offset, nbytes):
        self.calls += 1
        return False


def test_an_os_that_cannot_populate_leaves_it_to_the_steps():
    caches = [K.huge_page_zeros([2, 64, 1, 16], torch.float32)]
    fake = NoPopulate()
    prefault = KvPrefault(fake, caches, 4)
    assert prefault.wait(60.0)  # waiters are not left hanging
    assert not prefault.supported and prefault.done == 4 and fake.calls == 1


def test_the_worker_stops_with_its_owner():
    regions = [(K.huge_page_zeros([1 << 20], torch.uint8), 0, 1 << 10)]
    progress = kv_prefault._Progress()
    progress.stop()
    kv_prefault._populate(K, regions, 1 << 10, 8, progress)
    assert progress.done == 0 and regions == []  # stopped: no block, caches let go

    prefault = KvPrefault(K, [K.huge_page_zeros([2, 64, 1, 16], torch.float32)], 4)
    progress = prefault._progress
    del prefault
    gc.collect()
    assert progress.stopped


def test_an_engine_faults_its_pool_in_and_decodes_the_same(tiny_model_dir, monkeypatch):
    """The runner of a fused engine starts the worker (SPECDEC_KV_PREFAULT=0: none);
    greedy output is the same either way, decoding while the worker runs."""
    params = SamplingParams(max_tokens=12, temperature=0.0, logprobs=3, ignore_eos=True)
    prompt = [list(range(1000, 1045))]

    def run():
        llm = LLM(model=str(tiny_model_dir), dtype="float32", enable_prefix_caching=False,
                  kv_cache_memory_gb=1 / 64)
        out = llm.generate(prompt, params, use_tqdm=False)[0]
        return llm, (out.token_ids, out.logprobs)

    llm, with_prefault = run()
    prefault = llm.engine.runner.kv_prefault
    assert prefault is not None and prefault.num_blocks == llm.engine.kv.num_blocks
    assert prefault.wait(120.0) and prefault.done == prefault.num_blocks
    assert llm.stats()["kv_blocks_prefaulted"] == prefault.num_blocks
    del llm
    monkeypatch.setenv(kv_prefault.ENV, "0")
    llm, without = run()
    assert llm.engine.runner.kv_prefault is None and llm.stats()["kv_blocks_prefaulted"] == 0
    assert with_prefault == without
