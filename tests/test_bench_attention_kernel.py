"""``python -m specdec.bench.attention_kernel``: its caches, table and timing on a tiny case."""

from __future__ import annotations

import pytest
import torch

from specdec import kernels
from specdec.bench import attention_kernel as bench

K = kernels.load()
pytestmark = pytest.mark.skipif(K is None, reason="fused CPU kernels could not be built")


def test_caches_table_and_a_timed_pass():
    caches, table = bench.caches_and_table(K, layers=2, context=40, kv_heads=3, head_dim=64,
                                           dtype=torch.float32)
    assert len(caches) == 2 and caches[0].shape == (2, 96, 3, 64)
    # 3 blocks of the 6 the caches hold, each once, in the table's one row
    assert table.shape == (1, 3) and len(set(table[0].tolist())) == 3
    assert int(table.max()) < 6
    assert not torch.equal(caches[0], caches[1])
    assert 0 < bench.seconds_per_layer(K, caches, table, 40, query_len=5, query_heads=9,
                                       repeats=1, dtype=torch.float32) < 1.0
    half, _ = bench.caches_and_table(K, layers=1, context=40, kv_heads=3, head_dim=64,
                                     dtype=torch.float16)
    assert half[0].dtype == torch.float16 and torch.equal(half[0], caches[0].half())
    assert 0 < bench.seconds_per_layer(K, half, table, 40, query_len=1, query_heads=9,
                                       repeats=1, dtype=torch.float32) < 1.0
